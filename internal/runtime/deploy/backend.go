package deploy

import (
	"context"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

var _ agentspec.Backend = (*Service)(nil)

// Check finds nothing a Docker host cannot run: every setting the schema
// takes has its Docker form. (A TCP listen address that only the
// topology's internal networks would carry, ListenUnreachable, is refused
// from the configuration alone, before a plan.)
func (s *Service) Check(agentspec.Agent) error { return nil }

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
