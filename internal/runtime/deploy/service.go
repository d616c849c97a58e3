package deploy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// DefaultHealthTimeout bounds the wait for a new runner's /healthz.
const DefaultHealthTimeout = 60 * time.Second

// Options configure a Service. Zero values: no logging, DefaultHealthTimeout,
// DefaultDockerSocket.
type Options struct {
	// StateDir holds agents/<id> (workspaces) and runners/<id> (runner files).
	StateDir string
	// Version of the program that deploys: part of the config hash, since
	// a new version may make a different runner container.
	Version string
	// Docker returns the daemon client. It is called only by an operation
	// that needs the daemon, so a host-mode agent run by an operator needs
	// none.
	Docker func(ctx context.Context) (client.APIClient, error)
	// DockerSocket is the daemon's socket on this host, mounted into a
	// container-mode runner.
	DockerSocket  string
	HealthTimeout time.Duration
	Logger        logging.Logger
}

// Service runs the lifecycle of agents: plan, apply with rollback, read,
// remove and import. It owns each agent's workspace, the runner's files
// (config, hash key, socket directory, agent.json) and the runner container.
type Service struct {
	o   Options
	log logging.Logger
}

// NewService returns the agent service for o.
func NewService(o Options) *Service {
	if o.HealthTimeout == 0 {
		o.HealthTimeout = DefaultHealthTimeout
	}
	if o.DockerSocket == "" {
		o.DockerSocket = DefaultDockerSocket
	}
	return &Service{o: o, log: logging.Or(o.Logger)}
}

func stepErr(step, field, what string, err error) error {
	return &fault.StepError{Step: step, Field: field, What: what, Err: err}
}

// TopicVersionDrift is the Warning a Read gives for a runner of another
// build than the provider's.
const TopicVersionDrift = "runner version drift"

// Layout is the agent's runner files under the service's state directory.
func (s *Service) Layout(agentID string) Layout { return LayoutFor(s.o.StateDir, agentID) }

// WorkspacePath is the agent's workspace under the state directory.
func (s *Service) WorkspacePath(agentID string) string { return workspace.Path(s.o.StateDir, agentID) }

// Plan derives the values an agent will have, without touching anything.
// Validation is ValidateSettings (and ParseListen for the listen address).
func (s *Service) Plan(_ context.Context, a agentspec.Agent) agentspec.Planned {
	id := a.Config.AgentID
	p := agentspec.Planned{WorkspacePath: s.WorkspacePath(id), Listen: a.Config.Listen}
	if p.Listen == "" {
		p.Listen = "unix://" + s.Layout(id).Socket
	}
	l, err := ParseListen(p.Listen)
	if err != nil {
		return p
	}
	p.Endpoint = l.Endpoint()
	if a.Config.Token == "" {
		return p
	}
	key, err := ReadHashKey(s.Layout(id))
	if err != nil {
		return p
	}
	s.complete(&a, l)
	p.ConfigHash = s.hash(a, key)
	return p
}

// complete fills what the service decides: the workspace, the journal,
// the listen address in its one form, and the home whose dotfiles
// allow_home_dotfiles means (the host user's who deploys, not the runner's).
func (s *Service) complete(a *agentspec.Agent, l Listener) {
	a.Config.Workspace = s.WorkspacePath(a.Config.AgentID)
	a.Config.Journal = s.Layout(a.Config.AgentID).JournalDir
	a.Config.Listen = l.String()
	if a.Config.FileAccess.HomeDir == "" {
		a.Config.FileAccess.HomeDir, _ = os.UserHomeDir()
	}
}

// hash is ConfigHash over what a plan can know: a threegate role's networks,
// DNS and env are resolved at apply, so the hash covers the threegate network
// and role in their place.
//
// A container-mode runner with an image of its own (runner.image) is not
// replaced for a new per-message image: it re-reads its config on SIGHUP
// (Server.Reload: a new backend, the prestarted container of the old image
// discarded), so container_mode.image is left out of its hash and Apply
// reloads it instead (reloadImage). A runner that runs from
// container_mode.image itself is replaced: its own image is the one
// replaced, and a runner kept on it would pin the old image (its removal
// fails while a container uses it). In host mode the image is the agent's
// whole environment.
func (s *Service) hash(a agentspec.Agent, key []byte) string {
	return s.hashRunning(a, a.RunnerImage(), key)
}

// hashRunning is hash for a runner that runs runnerImage.
func (s *Service) hashRunning(a agentspec.Agent, runnerImage string, key []byte) string {
	c := a.Config
	set := agentspec.DeploySettings{Mode: a.Deployment(), Image: runnerImage, Version: s.o.Version}
	if reloadsImage(a) {
		c.Container.Image = ""
	}
	if a.Meta.ThreegateNetwork != "" {
		c.Container.Network, c.Container.Networks, c.Container.DNS, c.Env = "", nil, nil, nil
		c.Egress = c.Egress.WithoutApplied()
		set.ThreegateNetwork, set.ThreegateRole = a.Meta.ThreegateNetwork, a.Meta.ThreegateRole
		// The plan knows the ask targets' ids only; their sockets and
		// tokens are read at apply.
		c.Role, c.Ask = "", nil
		for _, id := range a.Meta.ThreegateAsk {
			c.Ask = append(c.Ask, agentspec.AskTarget{AgentID: id})
		}
	}
	return agentspec.ConfigHash(c, set, key)
}

func (s *Service) docker(ctx context.Context) (client.APIClient, error) {
	if s.o.Docker == nil {
		return nil, stepErr(agentspec.StepDocker, "", "connecting to the Docker daemon", errors.New("no Docker client configured"))
	}
	cli, err := s.o.Docker(ctx)
	if err != nil {
		return nil, stepErr(agentspec.StepDocker, "", "connecting to the Docker daemon", err)
	}
	return cli, nil
}

// CheckRuntime is agentspec.Backend's: the daemon's runtimes.
func (s *Service) CheckRuntime(ctx context.Context, name string) error {
	cli, err := s.docker(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", agentspec.ErrBackendUnreachable, err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		return fmt.Errorf("%w: %w", agentspec.ErrBackendUnreachable, err)
	}
	return CheckRuntime(ctx, cli, name)
}

// CheckRuntime asks the daemon whether it has an OCI runtime.
func CheckRuntime(ctx context.Context, cli client.APIClient, name string) error {
	info, err := cli.Info(ctx)
	if err != nil {
		return fmt.Errorf("docker info: %w", err)
	}
	if _, ok := info.Runtimes[name]; ok {
		return nil
	}
	have := slices.Sorted(maps.Keys(info.Runtimes))
	return fmt.Errorf("the Docker daemon has no %q runtime (it has: %s); install it and register it in daemon.json (for runsc: scripts/runsc.sh docker), or use runc",
		name, strings.Join(have, ", "))
}

// threegateRoleNames maps the agent's role names onto the topology's.
var threegateRoleNames = map[string]string{
	"core": topospec.RoleCore, "fetch": topospec.RoleFetch, "tool_exec": topospec.RoleToolExec,
}

// resolveThreegate returns the networks a role's members join, the env and
// the DNS upstream they get, from the live topology whose id (its name) is
// given.
func resolveThreegate(ctx context.Context, cli client.APIClient, networkID, role string) (topospec.Role, error) {
	name, ok := threegateRoleNames[role]
	if !ok {
		return topospec.Role{}, fmt.Errorf("unknown role %q", role)
	}
	r, err := topology.ResolveRole(ctx, cli, networkID, name)
	if err != nil {
		return topospec.Role{}, fmt.Errorf("%w (apply the threegate_network first, and give its id)", err)
	}
	return r, nil
}
