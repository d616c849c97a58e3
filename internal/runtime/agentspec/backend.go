package agentspec

import (
	"context"
	"errors"
	"time"
)

// Backend runs agents' lifecycles on one kind of infrastructure: deploy's
// Service on a Docker host, kubedeploy's Backend on a Kubernetes cluster.
// The provider, the bench and the tests drive either through this one
// interface, with the same Agent and the same results.
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
	// List finds the agents this backend holds (its state directory, its
	// namespace), each by the provider's own labels and files, in id
	// order: the importable ones and what is left of one that is not.
	List(ctx context.Context) ([]Listed, error)
	// Send hands text to the agent's running runner as its owner would
	// (the runner's own token, read from what the backend holds) and
	// waits for the answer, at most timeout.
	Send(ctx context.Context, id, text string, timeout time.Duration) (MessageReply, error)
	// ShortToken makes a short-lived API token for the agent from the
	// runner's own token (read from what the backend holds), good for
	// ttl (at most MaxShortTokenTTL), and says when it expires.
	ShortToken(ctx context.Context, id string, ttl time.Duration) (string, time.Time, error)

	// Check says what of a this backend cannot honour, each a *fault.FieldError
	// on the setting (joined), or nil, and what it will do with a that the
	// owner should know (warnings, each on the setting it concerns). It
	// needs nothing but a, so a plan runs it; Apply refuses the same.
	Check(a Agent) ([]Warning, error)
	// CheckAsk checks the agents a core agent of the topology asks, as far
	// as they are deployed: an error for each that can never be asked; one
	// not deployed yet wraps ErrAskTargetNotDeployed (its apply waits).
	CheckAsk(ctx context.Context, topology string, ids []string) error
	// RunnerName names an agent's runner in a plan's words ("the runner
	// container meepa-runner-a").
	RunnerName(agentID string) string
	// CheckRuntime says whether the backend can run message sandboxes
	// under the OCI runtime called name (the Docker daemon's runtimes, the
	// cluster's RuntimeClasses), with what it has when it cannot. An error
	// wrapping ErrBackendUnreachable means it could not ask; apply asks again.
	CheckRuntime(ctx context.Context, name string) error
}

// ErrBackendUnreachable marks a check the backend could not make because
// its daemon or cluster did not answer.
var ErrBackendUnreachable = errors.New("backend unreachable")

// Agent is one agent as its owner describes it: the runner's config and
// what lies beyond it (the metadata).
type Agent struct {
	// Config is the runner's config. Listen is as the host sees it (empty:
	// the default socket); Workspace is set by the service; Token is
	// empty for a new agent (Apply makes one).
	Config Config
	Meta   Meta
}

// RunnerImage runs `agent-runner serve`: Meta.RunnerImage, else the
// per-message image.
func (a Agent) RunnerImage() string {
	if a.Meta.RunnerImage != "" {
		return a.Meta.RunnerImage
	}
	return a.Config.Container.Image
}

// Deployment is Meta.Deployment or its default.
func (a Agent) Deployment() string {
	if a.Meta.Deployment == "" {
		return DefaultMode
	}
	return a.Meta.Deployment
}

// Meta is what an agent holds beyond its runner's config. On Docker it is
// kept beside the config as agent.json (no secrets in it) so that import
// can restore the whole agent.
type Meta struct {
	Soul                  string `json:"soul"`
	Memory                string `json:"memory"`
	ManageSoul            bool   `json:"manage_soul"`
	ForceDestroyWorkspace bool   `json:"force_destroy_workspace"`
	Deployment            string `json:"deployment"`
	// RunnerImage is the runner's own image as given; empty means the
	// per-message image.
	RunnerImage      string `json:"runner_image"`
	ThreegateNetwork string `json:"threegate_network,omitempty"`
	ThreegateRole    string `json:"threegate_role,omitempty"`
	// ThreegateAsk are the agent ids a core agent may ask; their
	// addresses and tokens are resolved at apply.
	ThreegateAsk []string `json:"threegate_ask,omitempty"`
}

// Runner statuses Apply and Read report.
const (
	StatusRunning    = "running"
	StatusExternal   = "external"
	StatusMissing    = "missing"
	StatusStopped    = "stopped"
	StatusRestarting = "restarting"
	// StatusStale is a running runner whose config hash is not the
	// config's on disk.
	StatusStale = "stale"
)

// Unreported stands for a value a runner did not report.
const Unreported = -1

// Reported is what a live runner says of itself in /healthz that is worth
// keeping: its Landlock ABI and the uid its host-mode agents run under.
// Either is Unreported when the runner did not say (container mode, an
// external runner, one not reached).
type Reported struct {
	LandlockABI int64
	AgentUID    int64
}

// NotReported is a runner that said nothing.
var NotReported = Reported{LandlockABI: Unreported, AgentUID: Unreported}

// Planned is what Plan derives before anything is made.
type Planned struct {
	WorkspacePath string
	// Listen is the listen address with its default filled in.
	Listen string
	// Endpoint is where clients reach the runner; "" while Listen is invalid.
	Endpoint string
	// ConfigHash is what Apply will record; "" when it cannot be known yet
	// (a new agent has no token and no hash key).
	ConfigHash string
}

// Prior is what the previous apply of an agent recorded.
type Prior struct {
	// Deployment is the recorded deployment mode; a runner container may
	// be left from a "container" one.
	Deployment        string
	RunnerStatus      string
	RunnerContainerID string
	Reported          Reported
}

// Applied is an agent as Apply left it.
type Applied struct {
	Token             string
	WorkspacePath     string
	Endpoint          string
	ConfigHash        string
	RunnerStatus      string
	RunnerContainerID string
	// Reported is what the runner's /healthz said.
	Reported Reported
	Warnings []Warning
}

// Observed is what Read found of an agent.
type Observed struct {
	// WorkspacePath is "" when the workspace is gone.
	WorkspacePath string
	// Soul is SOUL.md's content when the workspace has one.
	Soul        string
	SoulPresent bool
	// ConfigHash is the hash of the config as Apply would compute it; ""
	// when the config or its key is gone or unreadable.
	ConfigHash string
	// RunnerStatus is one of the Status* values; RunnerContainerID is set
	// for a runner the backend runs.
	RunnerStatus      string
	RunnerContainerID string
	// Warnings explain drift the fields alone do not (a runner of another
	// build).
	Warnings []Warning
}

// Imported is an agent read back from what its backend holds.
type Imported struct {
	Agent    Agent
	Endpoint string
	// Reported is what the live runner said.
	Reported Reported
}

// Listed is one agent a backend holds, as List finds it.
type Listed struct {
	ID string
	// Status is the runner's state: StatusRunning, StatusMissing,
	// StatusExternal, or the backend's word for another ("stopped").
	Status string
	// Orphan, when set, says why the agent cannot be imported (a runner
	// left without its config) and what removes it.
	Orphan string
}

// Warning is something the caller should tell the agent's owner.
type Warning struct {
	// Topic names the kind ("workspace ownership", a backend's drift).
	Topic  string
	Detail string
	// Field is the setting the warning concerns, a dotted path as in
	// fault.FieldError ("container_mode.network"); "" for the agent as a whole.
	Field string
}

// StopTimeout lets a runner being replaced finish its message in flight:
// the message timeout and 5 seconds, at most 5 minutes.
func StopTimeout(c Config) time.Duration {
	t := c.Container.Timeout() + 5*time.Second
	if t > 5*time.Minute {
		t = 5 * time.Minute
	}
	return t
}
