package deploy

import (
	"context"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

var _ agentspec.Backend = (*Service)(nil)

// Check finds nothing a Docker host cannot run: every setting the schema
// takes has its Docker form. (A TCP listen address that only the
// topology's internal networks would carry, ListenUnreachable, is refused
// from the configuration alone, before a plan.) It warns of what Docker
// will do otherwise than the owner may expect: denies inside an allowed
// tree that the runner expands around (DenyWarnings), a host-mode agent's
// network under an external runner (HostNetworkWarning), and names that do
// not resolve under gVisor on the managed bridge (RunscBridgeWarning).
func (s *Service) Check(a agentspec.Agent) ([]agentspec.Warning, error) {
	var ws []agentspec.Warning
	for _, w := range DenyWarnings(a) {
		ws = append(ws, agentspec.Warning{Topic: TopicExpandedDeny, Field: "file_access.deny", Detail: w})
	}
	if w := HostNetworkWarning(a); w != "" {
		ws = append(ws, agentspec.Warning{Topic: TopicHostNetwork, Field: "file_access.allow_network", Detail: w})
	}
	if w := RunscBridgeWarning(a); w != "" {
		ws = append(ws, agentspec.Warning{Topic: TopicRunscNames, Field: "container_mode.network", Detail: w})
	}
	return ws, nil
}

// Topics of Check's warnings.
const (
	TopicExpandedDeny = "expanded deny"
	TopicHostNetwork  = "host-mode network"
	TopicRunscNames   = "runsc names"
)

// RunscBridgeWarning says, for a container-mode agent under gVisor on the
// managed bridge, that host names do not resolve there; "" otherwise.
// gVisor's own network stack cannot reach Docker's embedded DNS server,
// which answers every container on a user-defined network.
func RunscBridgeWarning(a agentspec.Agent) string {
	cm := a.Config.Container
	if !cm.Enabled || cm.Runtime != "runsc" || cm.Network != "bridge" || len(cm.Networks) != 0 || a.Meta.ThreegateNetwork != "" {
		return ""
	}
	return "With runtime = \"runsc\" a message reaches the outside by address only: gVisor's own network stack cannot reach " +
		"Docker's embedded DNS server (127.0.0.11), which answers every container on a user-defined network such as the " +
		"managed bridge, so a host name does not resolve. Use runc for an agent that needs names (docs/guides/gvisor.md)."
}

// CheckAsk is ResolveAsk for a plan: what the runner files under the state
// directory show of the ask targets.
func (s *Service) CheckAsk(_ context.Context, topology string, ids []string) error {
	_, err := ResolveAsk(s.o.StateDir, topology, ids)
	return err
}

// RunnerName names the agent's runner container as a plan says it.
func (s *Service) RunnerName(agentID string) string {
	return "the runner container " + ContainerName(agentID)
}
