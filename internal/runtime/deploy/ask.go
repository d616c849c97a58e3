package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// ResolveAsk checks the agents a core agent of topology topologyID wants to
// ask and returns how its runner reaches them: each must be a fetch or
// tool_exec agent of the same topology (its runner joins the topology's
// llmnet), read from its runner config under stateDir; its listen address
// and token come from there. A target without a config yet fails with
// ErrAskTargetNotDeployed (wrapped), which a plan may let pass.
func ResolveAsk(stateDir, topologyID string, ids []string) ([]agentspec.AskTarget, error) {
	llmnet := topology.NetworkName(topologyID, topospec.LLMNet)
	var out []agentspec.AskTarget
	var errs []error
	for _, id := range ids {
		if !workspace.ValidID(id) {
			errs = append(errs, fmt.Errorf("ask %q: not an agent id", id))
			continue
		}
		cfg, err := agentspec.LoadConfig(LayoutFor(stateDir, id).ConfigFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("ask %q: %w: no meepa_agent with this agent_id has been applied", id, agentspec.ErrAskTargetNotDeployed))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("ask %q: %w", id, err))
			continue
		}
		if err := agentspec.CheckAskRole(cfg.Role); err != nil {
			errs = append(errs, fmt.Errorf("ask %q: %w", id, err))
			continue
		}
		if !slices.Contains(cfg.Container.Networks, llmnet) {
			errs = append(errs, fmt.Errorf("ask %q: it is not in the threegate_network %q (it joins %s)", id, topologyID, strings.Join(cfg.Container.Networks, ", ")))
			continue
		}
		out = append(out, agentspec.AskTarget{AgentID: cfg.AgentID, Role: cfg.Role, Listen: cfg.Listen, Token: cfg.Token})
	}
	return out, errors.Join(errs...)
}

// askHostPaths are the target runners' socket directories, mounted at the
// same path into the asking runner's container.
func askHostPaths(c agentspec.Config) []HostPath {
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
