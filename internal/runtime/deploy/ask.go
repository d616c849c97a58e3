package deploy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// ErrAskTargetNotDeployed: an ask target has no runner config yet (it is
// applied in the same run); the plan cannot check it, the apply waits for
// it (WaitForAsk).
var ErrAskTargetNotDeployed = errors.New("not deployed yet")

// AskWait bounds how long an apply waits for ask targets that are not
// deployed yet. Agents planned in one run with no reference between them
// (one for_each over a fleet) are applied side by side, so a core agent
// may be applied before the agents it asks; their runner config appears
// early in their apply.
const AskWait = 5 * time.Minute

// WaitForAsk calls resolve until it finds every target, fails for another
// reason than a target not deployed yet, or wait has passed.
func WaitForAsk(ctx context.Context, wait time.Duration, resolve func() ([]agentspec.AskTarget, error)) ([]agentspec.AskTarget, error) {
	deadline := time.Now().Add(wait)
	for {
		targets, err := resolve()
		if err == nil || !onlyNotDeployed(err) {
			return targets, err
		}
		if time.Now().After(deadline) {
			return targets, fmt.Errorf("%w (after waiting %s for agents applied in the same run; is a meepa_agent with that agent_id in the configuration?)", err, wait)
		}
		select {
		case <-ctx.Done():
			return targets, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// onlyNotDeployed: every error joined in err is a target not deployed yet.
func onlyNotDeployed(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return errors.Is(err, ErrAskTargetNotDeployed)
	}
	for _, e := range j.Unwrap() {
		if !errors.Is(e, ErrAskTargetNotDeployed) {
			return false
		}
	}
	return true
}

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
			errs = append(errs, fmt.Errorf("ask %q: %w: no meepa_agent with this agent_id has been applied", id, ErrAskTargetNotDeployed))
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
