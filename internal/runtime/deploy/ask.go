package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// ErrAskTargetNotDeployed: an ask target has no runner config yet (it is
// applied in the same run); the plan cannot check it, the apply will.
var ErrAskTargetNotDeployed = errors.New("not deployed yet")

// ResolveAsk checks the agents a core agent of topology topologyID wants to
// ask and returns how its runner reaches them: each must be a fetch or
// tool_exec agent of the same topology (its runner joins the topology's
// llmnet), read from its runner config under stateDir; its listen address
// and token come from there. A target without a config yet fails with
// ErrAskTargetNotDeployed (wrapped), which a plan may let pass.
func ResolveAsk(stateDir, topologyID string, ids []string) ([]runner.AskTarget, error) {
	llmnet := topology.NetworkName(topologyID, topospec.LLMNet)
	var out []runner.AskTarget
	var errs []error
	for _, id := range ids {
		if !ValidID(id) {
			errs = append(errs, fmt.Errorf("ask %q: not an agent id", id))
			continue
		}
		cfg, err := runner.LoadConfig(LayoutFor(stateDir, id).ConfigFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("ask %q: no meepa_agent with this agent_id is %w (reference it, e.g. meepa_agent.fetch.agent_id, so that it is applied first)", id, ErrAskTargetNotDeployed))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("ask %q: %w", id, err))
			continue
		}
		if cfg.Role != agent.RoleFetch && cfg.Role != agent.RoleToolExec {
			errs = append(errs, fmt.Errorf("ask %q: a core agent asks only fetch and tool_exec agents; this one's role is %q", id, orNone(cfg.Role)))
			continue
		}
		if !slices.Contains(cfg.Container.Networks, llmnet) {
			errs = append(errs, fmt.Errorf("ask %q: it is not in the threegate_network %q (it joins %s)", id, topologyID, strings.Join(cfg.Container.Networks, ", ")))
			continue
		}
		out = append(out, runner.AskTarget{AgentID: cfg.AgentID, Role: cfg.Role, Listen: cfg.Listen, Token: cfg.Token})
	}
	return out, errors.Join(errs...)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// askHostPaths are the target runners' socket directories, mounted at the
// same path into the asking runner's container.
func askHostPaths(c runner.Config) []HostPath {
	var out []HostPath
	for _, a := range c.Ask {
		if sock, ok := strings.CutPrefix(a.Listen, "unix://"); ok {
			// Read-only: connecting needs no write access, and the asking
			// runner must not replace the target's socket.
			out = append(out, HostPath{Path: filepath.Dir(sock), ReadOnly: true})
		}
	}
	return out
}
