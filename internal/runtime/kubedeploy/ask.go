package kubedeploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// ResolveAsk checks the agents a core agent of topology topologyName wants
// to ask, as the Docker service's ResolveAsk does, and returns how its runner
// reaches them: each must be a fetch or tool_exec agent of the same
// topology in the service's namespace, read from its config Secret, which
// also gives its token and port. The token lands in the asking runner's
// own Secret, so that runner reads no Secret itself. A target without a
// Secret yet fails with agentspec.ErrAskTargetNotDeployed (wrapped), which a
// plan may let pass.
func (s *Service) ResolveAsk(ctx context.Context, topologyName string, ids []string) ([]agentspec.AskTarget, error) {
	if topologyName == "" {
		return nil, errors.New("only an agent in a threegate topology may ask other agents")
	}
	var out []agentspec.AskTarget
	var errs []error
	for _, id := range ids {
		t, err := s.askTarget(ctx, topologyName, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("ask %q: %w", id, err))
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}

func (s *Service) askTarget(ctx context.Context, topologyName, id string) (agentspec.AskTarget, error) {
	var t agentspec.AskTarget
	if !workspace.ValidID(id) {
		return t, errors.New("not an agent id")
	}
	cfg, _, err := s.secretState(ctx, NamesFor(id))
	switch {
	case err != nil:
		return t, err
	case cfg == nil:
		return t, fmt.Errorf("%w: no meepa_agent with this agent_id has been applied in namespace %s", agentspec.ErrAskTargetNotDeployed, s.o.Client.Namespace)
	case agentspec.CheckAskRole(cfg.Role) != nil:
		return t, agentspec.CheckAskRole(cfg.Role)
	case cfg.Kubernetes == nil || cfg.Kubernetes.Topology != topologyName:
		return t, fmt.Errorf("it is not in the threegate_network %q", topologyName)
	}
	_, p, err := net.SplitHostPort(cfg.Listen)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < 1 || port > 65535 || cfg.Token == "" {
		return t, fmt.Errorf("its runner config has no port (listen %q) or no token", cfg.Listen)
	}
	return agentspec.AskTarget{AgentID: cfg.AgentID, Role: cfg.Role, Port: port, Token: cfg.Token}, nil
}
