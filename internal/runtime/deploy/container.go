package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/docker/go-connections/nat"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Labels on the runner container (under engine.LabelPrefix).
const (
	ComponentRunner = "runner"
	LabelConfigHash = engine.LabelPrefix + "config-hash"
)

// DefaultDockerSocket is the daemon socket mounted into the runner when the
// provider does not talk to the daemon over a unix socket of its own.
const DefaultDockerSocket = "/var/run/docker.sock"

// The runner service's own budget: the runner container's limits, and in
// host mode what the runner needs on top of its agent child's limits.
const (
	RunnerMemory = 256 << 20
	RunnerPids   = 256
)

// ContainerName is the runner container's name. It is a function of the
// agent id alone: Docker refuses a second container with the same name, which
// is what makes "one agent, one runner" hold across replacements and
// concurrent applies.
func ContainerName(agentID string) string { return "meepa-runner-" + agentID }

// HostPath is a host path the runner needs at the same path inside its
// container (Landlock host mode: what file_access names).
type HostPath struct {
	Path     string
	ReadOnly bool
}

// Cover is a denied path inside an allowed tree (host mode) that the
// runner container gets an empty read-only mount over: a tmpfs over a
// directory, Layout.EmptyFile over a file. The agent then sees nothing of
// it, while the tree around it stays whole (no Landlock expansion).
type Cover struct {
	Path string
	Dir  bool
}

// Deployment is one runner service container.
//
// Defaults: Memory RunnerMemory (256 MiB), PidsLimit RunnerPids (256),
// StopTimeout 30 s, Network "none".
// An empty DockerSocket mounts no socket (host mode needs none).
type Deployment struct {
	AgentID string
	// Image has agent-runner on its PATH (an isolation image).
	Image string
	// Layout locates the config (mounted read-only), the socket directory
	// and the journal (mounted read-write).
	Layout Layout
	// Listener is where the runner listens. A TCP port is published on the
	// host's 127.0.0.1 only.
	Listener Listener
	// Workspace is the workspace's host path, mounted at the same path:
	// the runner hands it to Docker as a bind source, and in host mode
	// its agent-run children work in it.
	Workspace string
	// HostPaths are extra mounts at the same path (host mode).
	HostPaths []HostPath
	// Covers hide denied paths inside HostPaths (host mode).
	Covers []Cover
	// DockerSocket is the daemon's socket on the host, mounted only when set:
	// container mode needs it to start the per-message containers; host
	// mode runs its agents as children and must not hand them a
	// root-equivalent socket, even one they are filtered away from.
	DockerSocket string
	// User is "uid:gid" for the service; GroupAdd lets it use the Docker
	// socket without being root.
	User     string
	GroupAdd []string
	// CapAdd is what the service needs back after dropping every
	// capability: a root runner hands the workspace to the sandbox user
	// (CHOWN, and DAC_READ_SEARCH to walk a tree the agent owns).
	CapAdd []string
	// Network is the runner's own network: "none" (unix socket, container
	// mode: it only talks to the daemon), "bridge", or the first of Networks.
	Network  string
	Networks []string
	// DNS is the only upstream of the engine's resolver on Networks (a
	// ThreeGate topology's DNS sink); empty leaves the engine's choice.
	DNS []agentspec.Addr
	// SecurityOpt is extra, e.g. a seccomp profile that lets Landlock's
	// syscalls through for host mode.
	SecurityOpt []string
	Memory      int64
	PidsLimit   int64
	// StopTimeout lets the runner finish the message in flight on SIGTERM.
	StopTimeout time.Duration
	// ConfigHash is recorded as a label, so Read can tell a runner that
	// runs an older config.
	ConfigHash string
	// Env is extra environment for the service (never secrets: they are in
	// the config file).
	Env []string
	// Fresh is set for an agent that was never applied (no prior state):
	// Deploy creates its runner without first stopping and removing one,
	// and does that only when the daemon refuses the name (a runner left
	// by an earlier run that crashed before its state was saved).
	Fresh bool
}

func (d Deployment) withDefaults() Deployment {
	if d.Memory == 0 {
		d.Memory = RunnerMemory
	}
	if d.PidsLimit == 0 {
		d.PidsLimit = RunnerPids
	}
	if d.StopTimeout == 0 {
		d.StopTimeout = 30 * time.Second
	}
	if d.Network == "" {
		d.Network = "none"
		if len(d.Networks) > 0 {
			d.Network = d.Networks[0]
		}
	}
	return d
}

// Spec is the runner container's configuration: hardened like everything
// here — read-only rootfs, every capability dropped, no-new-privileges,
// memory and pids limits, a small /tmp tmpfs — and restarted unless stopped.
// Its only host mounts are the Docker socket (it must start the per-message
// containers; that socket is root-equivalent, which is why the runner is a
// service of its own and never shares a process with an agent), its config
// directory read-only, its socket directory and journal, the workspace, and
// in host mode the file_access paths.
func Spec(d Deployment) (*container.Config, *container.HostConfig, *network.NetworkingConfig) {
	d = d.withDefaults()
	stopSecs := int(d.StopTimeout / time.Second)
	cfg := &container.Config{
		Image:      d.Image,
		Entrypoint: []string{"agent-runner"},
		Cmd:        []string{"serve", "--config", d.Layout.ConfigFile},
		User:       d.User,
		Env:        append([]string{"TMPDIR=/tmp"}, d.Env...),
		WorkingDir: "/",
		Labels: engine.Labels(ComponentRunner, map[string]string{
			sandbox.LabelAgent: d.AgentID,
			LabelConfigHash:    d.ConfigHash,
		}),
		StopTimeout: &stopSecs,
	}
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: d.Layout.Dir, Target: d.Layout.Dir, ReadOnly: true},
		{Type: mount.TypeBind, Source: d.Layout.SocketDir, Target: d.Layout.SocketDir},
		{Type: mount.TypeBind, Source: d.Layout.JournalDir, Target: d.Layout.JournalDir},
		{Type: mount.TypeBind, Source: d.Workspace, Target: d.Workspace},
	}
	if d.DockerSocket != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: d.DockerSocket, Target: DefaultDockerSocket})
		cfg.Env = append(cfg.Env, "DOCKER_HOST=unix://"+DefaultDockerSocket)
	}
	if d.Listener.Unix != "" && !strings.HasPrefix(d.Listener.Unix, d.Layout.SocketDir+"/") {
		// A socket placed by the user elsewhere: its directory is mounted.
		dir := d.Listener.Unix[:strings.LastIndex(d.Listener.Unix, "/")]
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: dir})
	}
	for _, p := range d.HostPaths {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: p.Path, Target: p.Path, ReadOnly: p.ReadOnly})
	}
	tmpfs := map[string]string{"/tmp": "rw,nosuid,nodev,size=64m"}
	if len(d.Covers) > 0 {
		// The runner believes only the covers its deployment names (and
		// checks each is an empty read-only mount).
		paths := make([]string, len(d.Covers))
		for i, c := range d.Covers {
			paths[i] = c.Path
		}
		listed, _ := json.Marshal(paths) // a []string always marshals
		cfg.Env = append(cfg.Env, sandbox.CoversEnv+"="+string(listed))
	}
	for _, c := range d.Covers {
		// Docker mounts parents before children, so these land on top of
		// the HostPaths that hold them.
		if c.Dir {
			tmpfs[c.Path] = "ro,nosuid,nodev,noexec,size=4k,mode=0555"
			continue
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: d.Layout.EmptyFile, Target: c.Path, ReadOnly: true})
	}
	hc := &container.HostConfig{
		Mounts:         mounts,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         d.CapAdd,
		SecurityOpt:    append([]string{"no-new-privileges"}, d.SecurityOpt...),
		GroupAdd:       d.GroupAdd,
		Tmpfs:          tmpfs,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyUnlessStopped},
		NetworkMode:    container.NetworkMode(d.Network),
		Resources: container.Resources{
			Memory:     d.Memory,
			MemorySwap: d.Memory,
			PidsLimit:  &d.PidsLimit,
		},
		LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "3"}},
	}
	if len(d.DNS) > 0 {
		// Names outside the runner's networks go to the sink, never to the
		// host's resolvers; no search domain sends a bare name out either.
		hc.DNS, hc.DNSSearch = agentspec.AddrStrings(d.DNS), []string{"."}
	}
	if d.Listener.Port != 0 {
		port := nat.Port(strconv.Itoa(d.Listener.Port) + "/tcp")
		cfg.ExposedPorts = nat.PortSet{port: {}}
		hc.PortBindings = nat.PortMap{port: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(d.Listener.Port)}}}
	}
	return cfg, hc, &network.NetworkingConfig{}
}

// Deploy replaces the agent's runner with a new one and starts it: the old
// one (if any) is stopped — it finishes its message in flight — and removed
// before the new one is created, so the two never run at once. For a Fresh
// agent the create comes first: the name is unique on the daemon, so a
// create that succeeds proves there was no runner to replace, and one the
// daemon refuses for its name is replaced as above.
func Deploy(ctx context.Context, cli client.APIClient, d Deployment) (string, error) {
	d = d.withDefaults()
	if !d.Fresh {
		if err := Remove(ctx, cli, d.AgentID, d.StopTimeout); err != nil {
			return "", err
		}
	}
	if d.Network == RunnerNetwork {
		if err := ensureRunnerNetwork(ctx, cli); err != nil {
			return "", err
		}
	}
	cfg, hc, nc := Spec(d)
	resp, err := cli.ContainerCreate(ctx, cfg, hc, nc, nil, ContainerName(d.AgentID))
	if d.Fresh && cerrdefs.IsConflict(err) {
		if rerr := Remove(ctx, cli, d.AgentID, d.StopTimeout); rerr != nil {
			return "", rerr
		}
		resp, err = cli.ContainerCreate(ctx, cfg, hc, nc, nil, ContainerName(d.AgentID))
	}
	if err != nil {
		return "", fmt.Errorf("runner create: %w", err)
	}
	for _, n := range d.Networks {
		if n == d.Network {
			continue
		}
		if err := cli.NetworkConnect(ctx, n, resp.ID, nil); err != nil {
			return "", errors.Join(fmt.Errorf("runner network connect %s: %w", n, err), discard(ctx, cli, resp.ID))
		}
	}
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return "", errors.Join(fmt.Errorf("runner start: %w", err), discard(ctx, cli, resp.ID))
	}
	return resp.ID, nil
}

// discard removes a runner container that failed to come up. It runs on a
// bounded context of its own: a cancelled apply must still not leave a
// half-made runner holding the agent's name.
func discard(ctx context.Context, cli client.APIClient, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the failed runner: %w", err)
	}
	return nil
}

// Status is what Inspect found.
type Status struct {
	// ID is the container id; empty when missing.
	ID string
	// State is "running", "stopped", "restarting" or "missing".
	State      string
	ConfigHash string
	Image      string
}

// Inspect finds the agent's runner by its name.
func Inspect(ctx context.Context, cli client.APIClient, agentID string) (Status, error) {
	c, err := cli.ContainerInspect(ctx, ContainerName(agentID))
	if cerrdefs.IsNotFound(err) {
		return Status{State: "missing"}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("runner inspect: %w", err)
	}
	s := Status{ID: c.ID, State: "stopped", Image: c.Config.Image, ConfigHash: c.Config.Labels[LabelConfigHash]}
	switch {
	case c.State.Restarting:
		s.State = "restarting"
	case c.State.Running:
		s.State = "running"
	}
	return s, nil
}

// Remove stops (SIGTERM, then SIGKILL after stopTimeout) and removes the
// agent's runner, then removes any per-message container of the agent it
// left behind. A runner that is not there is done.
func Remove(ctx context.Context, cli client.APIClient, agentID string, stopTimeout time.Duration) error {
	name := ContainerName(agentID)
	secs := int(stopTimeout / time.Second)
	var errs []error
	if err := cli.ContainerStop(ctx, name, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("runner stop: %w", err))
	}
	if err := cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("runner remove: %w", err))
	}
	if err := removeOrphans(ctx, cli, agentID); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeOrphans removes the agent's per-message containers, which only a
// runner killed mid-message leaves behind (a live runner removes its own).
func removeOrphans(ctx context.Context, cli client.APIClient, agentID string) error {
	if _, err := sandbox.RemoveOrphans(ctx, cli, agentID); err != nil {
		return fmt.Errorf("runner orphans: %w", err)
	}
	return nil
}

// Health polling backs off from healthFirstPoll, doubling up to
// healthMaxPoll: a runner is up in tens of milliseconds, so a fixed step
// would add most of a step to every apply.
const (
	healthFirstPoll = 2 * time.Millisecond
	healthMaxPoll   = 100 * time.Millisecond
)

// WaitHealthy polls the runner's /healthz until it answers 200 or timeout
// passes. When the container stops meanwhile, it fails at once with the tail
// of the container's log (the runner logs no secrets).
func WaitHealthy(ctx context.Context, cli client.APIClient, containerID string, l Listener, timeout time.Duration) (Health, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	delay := healthFirstPoll
	for {
		h, err := CheckHealth(ctx, l)
		if err == nil {
			return h, nil
		}
		last = err
		if containerID != "" {
			c, ierr := cli.ContainerInspect(ctx, containerID)
			if ierr == nil && !c.State.Running && !c.State.Restarting {
				return nil, fmt.Errorf("runner exited (code %d) before it was healthy: %w\n%s", c.State.ExitCode, last, LogTail(context.WithoutCancel(ctx), cli, containerID, 20))
			}
		}
		select {
		case <-ctx.Done():
			tail := ""
			if containerID != "" {
				tail = "\n" + LogTail(context.WithoutCancel(ctx), cli, containerID, 20)
			}
			return nil, fmt.Errorf("runner not healthy after %s: %w%s", timeout, last, tail)
		case <-time.After(delay):
		}
		delay = min(2*delay, healthMaxPoll)
	}
}

// LogTail returns the last n lines of a container's output.
func LogTail(ctx context.Context, cli client.APIClient, id string, n int) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: strconv.Itoa(n)})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }() // read-only stream
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		return out.String() + "(log read: " + err.Error() + ")"
	}
	return strings.TrimSpace(out.String())
}
