package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// Placement is where a runner config is served from: what ForConfig cannot
// read from the config itself.
type Placement struct {
	// Image has agent-runner on its PATH.
	Image string
	// Layout and Listener locate the config file and where the runner
	// listens (the Listener as the host sees it).
	Layout   Layout
	Listener Listener
	// Workspace is the agent's workspace on the host.
	Workspace string
	// ConfigHash is recorded on the container (see Deployment.ConfigHash).
	ConfigHash string
	// DockerSocket is the daemon's socket on this host; DefaultDockerSocket
	// when empty. Only container mode mounts it.
	DockerSocket string
}

// ForConfig describes the runner container that serves config c. It runs
// as the calling user. In container mode the runner gets the Docker socket
// (and the socket's group) to start the per-message containers, and as
// root the capabilities to hand the workspace to the sandbox user. In host
// mode the agent loop is the runner's own Landlock-restricted child: the
// runner gets the agent's limits on top of its own, the file_access paths
// mounted at the same path, the role's networks, and (unless unrestricted)
// a seccomp profile that lets Landlock's syscalls through.
func ForConfig(c agentspec.Config, p Placement) (Deployment, error) {
	d := Deployment{
		AgentID:     c.AgentID,
		Image:       p.Image,
		Layout:      p.Layout,
		Listener:    p.Listener,
		Workspace:   p.Workspace,
		User:        fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()),
		StopTimeout: agentspec.StopTimeout(c),
		ConfigHash:  p.ConfigHash,
	}
	hostMode := !c.Container.Enabled
	if !hostMode {
		d.DockerSocket = p.DockerSocket
		if d.DockerSocket == "" {
			d.DockerSocket = DefaultDockerSocket
		}
		if st, err := os.Stat(d.DockerSocket); err == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				d.GroupAdd = []string{strconv.Itoa(int(sys.Gid))}
			}
		}
		if os.Getuid() == 0 {
			// The runner gives the workspace to the sandbox user at start-up.
			d.CapAdd = []string{"CHOWN", "DAC_READ_SEARCH"}
		}
	}
	// The runner relays the agent's LLM calls (the key stays with it), so
	// with a model provider it needs the route to base_url that the
	// per-message containers used to have: the role's networks, or
	// RunnerNetwork (never Docker's default bridge, where every container
	// of the host would reach its port).
	// A FETCH runner also revokes each message's egress credential at the
	// topology's proxy, on the role's networks.
	relays := relaysModelCalls(c)
	switch {
	case !hostMode && (relays || c.Egress != nil) && len(c.Container.Networks) > 0:
		d.Networks = c.Container.Networks
	case !hostMode && (relays || agentspec.BrokersInContainer(&c)) && c.Container.Network == "bridge":
		// A bridge agent's runner also brokers its bound secrets, and
		// dials the bound hosts from here.
		d.Network = RunnerNetwork
	case hostMode && len(c.Container.Networks) > 0:
		// The agent process runs inside the runner: the runner joins the
		// role's networks itself.
		d.Networks = c.Container.Networks
	case hostMode && (c.FileAccess.AllowNetwork || c.FileAccess.Unrestricted):
		// The tools run in the runner's own network namespace, so its
		// network is theirs: the managed bridge, whose rules keep them from
		// private, link-local and host addresses as network = "bridge" does
		// for a per-message container (usesBridge; ensureBridge makes it).
		d.Network = sandbox.ManagedBridge
	case p.Listener.Port != 0:
		d.Network = RunnerNetwork
	default:
		d.Network = "none"
	}
	if len(d.Networks) > 0 {
		d.DNS = c.Container.DNS
	}
	// A core agent reaches the runners it may ask on their sockets.
	d.HostPaths = append(d.HostPaths, askHostPaths(c)...)
	if !hostMode {
		return d, nil
	}
	// The agent loop runs as a child of the runner; its limits come on top
	// of the runner's own.
	d.Memory = agentspec.MemoryOrDefault(c.Container.MemoryLimit).Bytes() + RunnerMemory
	d.PidsLimit = c.Container.PidsLimit + RunnerPids
	for _, path := range c.FileAccess.AllowRead {
		d.HostPaths = append(d.HostPaths, HostPath{Path: path, ReadOnly: true})
	}
	for _, path := range c.FileAccess.AllowReadWrite {
		d.HostPaths = append(d.HostPaths, HostPath{Path: path})
	}
	if !c.FileAccess.Unrestricted {
		d.Covers = covers(c.FileAccess)
		d.CapAdd = hostModeCaps()
	}
	if !c.FileAccess.Unrestricted {
		// Docker's default profile, with Landlock's syscalls allowed on
		// engines whose default denies them (the runner would fail closed
		// there).
		prof, err := sandbox.RunnerSeccompProfile()
		if err != nil {
			return d, err
		}
		d.SecurityOpt = []string{"seccomp=" + string(prof)}
	}
	return d, nil
}

// hostModeCaps are what a root runner needs to run each agent under the
// agent's own uid (agentspec.AgentUID), so that Unix permissions keep the
// runner's files from the agent and its chmod/chown on them fail: SETUID
// and SETGID to switch, CHOWN to hand it the workspace and its scratch
// directory, DAC_OVERRIDE and FOWNER to walk, chown back and remove what
// the agent's uid made there. The child loses all of them when it leaves
// uid 0. A runner that is not root gets none: they would not be effective,
// and it runs the agent under its own uid, which it says at start.
func hostModeCaps() []string {
	if os.Getuid() != 0 {
		return nil
	}
	return []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"}
}

// covers are the denied paths inside allowed trees that exist now, as the
// runner container's mounts hide them. A symlink is not covered (the mount
// would land on its target); a path made later is expanded around by the
// runner instead, which it logs.
func covers(fa landlock.FileAccess) []Cover {
	var out []Cover
	for _, in := range landlock.DeniesInside(fa) {
		fi, err := os.Lstat(in.Path)
		if err != nil || !(fi.IsDir() || fi.Mode().IsRegular()) {
			continue
		}
		// Reached through a symlink, the mount would land elsewhere; and
		// the runner's own /tmp is a tmpfs of its own.
		if real, err := filepath.EvalSymlinks(in.Path); err != nil || real != in.Path || in.Path == "/tmp" {
			continue
		}
		c := Cover{Path: in.Path, Dir: fi.IsDir()}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// DenyWarnings are what a plan says about a host-mode agent's denies that
// lie inside an allowed tree and will be expanded around rather than
// hidden: for the provider's runner container, those that do not exist yet
// (there is nothing to mount over; the others are covered, see covers);
// for an external runner all of them, since only a runner started as root
// can mount over them and the provider cannot know how it is started.
func DenyWarnings(a agentspec.Agent) []string {
	fa := a.Config.FileAccess
	if a.Config.Container.Enabled || fa.Unrestricted {
		return nil
	}
	if a.Deployment() == agentspec.ModeExternal {
		return landlock.ExpandedDenies(fa)
	}
	var covered []string
	for _, c := range covers(fa) {
		covered = append(covered, c.Path)
	}
	return landlock.ExpandedDenies(fa, covered...)
}

// relaysModelCalls says whether the runner calls a model endpoint for its
// messages (offline does not), so needs a route to base_url.
func relaysModelCalls(c agentspec.Config) bool {
	return c.LLM.Provider == "openai" || c.LLM.Provider == "anthropic"
}

// ListenUnreachable says why a runner cannot be reached on l, or nil. A
// runner in a container that joins only its ThreeGate topology's networks
// (host mode, where the agent runs inside it, or a container-mode agent
// that relays model calls through llmnet) has no network that Docker
// publishes a port from: the topology's networks are internal, and a port
// on llmnet would hand the runner's API to the topology's own sandboxes.
// Such a runner listens on a unix socket. onTopology says the agent is a
// ThreeGate member (its networks may not be resolved yet).
func ListenUnreachable(c agentspec.Config, deployment string, onTopology bool, l Listener) error {
	if deployment != agentspec.ModeContainer || l.Port == 0 || !(onTopology || len(c.Container.Networks) > 0) {
		return nil
	}
	if c.Container.Enabled && !relaysModelCalls(c) {
		// Its runner needs no topology network: it sits on its own.
		return nil
	}
	return &fault.FieldError{Field: "runner.listen", Index: -1, Err: fmt.Errorf(
		"%s: this agent's runner joins only its ThreeGate topology's networks, which are internal (Docker publishes no port "+
			"from them, and a port there would be open to the topology's sandboxes); use a unix socket, as in "+
			"unix:///run/meepa/%s.sock, or leave runner.listen unset for the default socket", l.String(), agentOrName(c.AgentID))}
}

func agentOrName(id string) string {
	if id == "" {
		return "agent"
	}
	return id
}
