package deploy

import "context"

// Backend runs agents' lifecycles on one kind of infrastructure: Service on
// a Docker host, kubedeploy.Backend on a Kubernetes cluster. The provider,
// the bench and the tests drive either through this one interface, with
// the same Agent and the same results.
type Backend interface {
	// Plan derives what an agent will look like, changing nothing.
	Plan(ctx context.Context, a Agent) Planned
	// Apply makes the agent real; prior is nil for a new one, redeploy
	// asks for the runner to be replaced.
	Apply(ctx context.Context, a Agent, prior *Prior, redeploy bool) (Applied, error)
	// Read observes the agent as it is.
	Read(ctx context.Context, a Agent) (Observed, error)
	// Remove takes the agent down; its workspace stays unless
	// a.Meta.ForceDestroyWorkspace.
	Remove(ctx context.Context, a Agent) error
	// Import restores an agent from what its backend holds.
	Import(ctx context.Context, id string) (Imported, error)
}

var _ Backend = (*Service)(nil)
