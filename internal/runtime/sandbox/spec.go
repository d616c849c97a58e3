package sandbox

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/strslice"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// Defaults of Spec's zero fields (the limits and their defaults are agentspec's).
const (
	// WorkspaceDir is where the agent workspace appears inside the container.
	WorkspaceDir = "/workspace"
	// RelayMountDir is where Spec.RelayDir (the runner's LLM relay socket)
	// appears inside the container, read-only.
	RelayMountDir = "/run/meepa"
	// Component is the engine.Labels component of per-message containers.
	Component = "message"
	// LabelAgent and LabelMessage are the label keys (after the io.meepa.
	// prefix) that name a per-message container's agent and message.
	LabelAgent   = engine.LabelPrefix + "agent"
	LabelMessage = engine.LabelPrefix + "message"
)

// DefaultCommand runs the agent loop from the isolation image's PATH.
var DefaultCommand = []string{"agent-runner", "agent-run"}

// Spec is what varies between agents' per-message containers. Everything
// else about the container is fixed by HardenedSpec. The zero value of each
// optional field is its documented default.
type Spec struct {
	AgentID string
	// Workspace is the host path bind-mounted read-write at /workspace; it is
	// the only host path the container sees.
	Workspace string
	Image     string
	// Command defaults to DefaultCommand.
	Command []string
	// MemoryLimit is the container's memory; swap is set equal, so the
	// container cannot swap past it. Unset: agentspec.DefaultMemoryBytes.
	MemoryLimit agentspec.Size
	// PidsLimit bounds processes and threads; default DefaultPidsLimit.
	PidsLimit int64
	// Network is "none" or "bridge" (the managed network ManagedBridge);
	// ignored when Networks is set. Default "none".
	Network string
	// Networks are named networks: the first joins at create, the rest are
	// connected before start (API 1.41 takes one endpoint at create).
	Networks []string
	// DNS, with Networks, is the only upstream the engine's resolver
	// forwards names it does not know to (a ThreeGate topology's DNS
	// sink); empty leaves the engine's choice, the host's resolvers.
	DNS []agentspec.Addr
	// User is the container's user; unset: AgentUser(AgentID), the
	// agent's own uid. Root and nobody are refused (UserFor).
	User agentspec.UserSpec
	// Runtime is the OCI runtime name; empty means the daemon's default.
	Runtime string
	// Env is extra non-secret environment (e.g. http_proxy). Secrets never
	// go here: they travel on stdin only.
	Env map[string]string
	// RelayDir is the host directory of the runner's LLM relay socket,
	// bind-mounted read-only at RelayMountDir; empty mounts nothing. It
	// holds nothing but the socket, which answers only a live message's
	// token.
	RelayDir string
	// TmpNoexec mounts /tmp noexec. Off by default: agents legitimately run
	// scripts they download to /tmp.
	TmpNoexec bool
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// dockerSockets are where daemons keep their socket; /var/run is usually a
// link to /run.
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// CheckWorkspace refuses a workspace that would hand the agent more of the
// host than its own directory (see CheckHostDir).
func CheckWorkspace(p string) error {
	if err := CheckHostDir(p); err != nil {
		return fmt.Errorf("workspace %w", err)
	}
	return nil
}

// CheckHostDir refuses a host directory that must not be bind-mounted into
// a sandbox or a runner: it must be absolute and clean (checked as Docker
// will use it), and neither the root nor a directory that holds the Docker
// socket, which is root on the host.
func CheckHostDir(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q: want an absolute, clean path", p)
	}
	for _, sock := range dockerSockets {
		if p == sock || strings.HasPrefix(sock, strings.TrimSuffix(p, "/")+"/") {
			return fmt.Errorf("%q: it holds the Docker socket %s", p, sock)
		}
	}
	return nil
}

// uidGid returns s.User (default the agent's own uid) as "uid:gid".
func (s Spec) uidGid() (string, error) {
	u, err := agentspec.UserFor(s.AgentID, s.User)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// HardenedSpec is the one place that says what a per-message container is:
// read-only rootfs, no capabilities, no-new-privileges, memory (swap equal)
// and pids limits, a 256 MB /tmp tmpfs, the workspace bind-mounted at
// /workspace and nothing else of the host, a non-root user, no IPC shm, no
// log copy of the reply (log driver "none"), stdin open once for the request,
// and the ownership labels. Its seccomp profile is the product's own
// (MessageSeccompProfile: Docker's default minus io_uring and what host mode
// refuses), the same on every engine version; the daemon's AppArmor
// profile stays in force; no host namespace is shared.
// messageID is "" for a prestarted container that has no message yet.
func HardenedSpec(s Spec, messageID string) (*container.Config, *container.HostConfig, *network.NetworkingConfig, error) {
	if s.AgentID == "" {
		return nil, nil, nil, fmt.Errorf("container spec: agent id is empty")
	}
	if s.Image == "" {
		return nil, nil, nil, fmt.Errorf("container spec: image is empty")
	}
	if err := CheckWorkspace(s.Workspace); err != nil {
		return nil, nil, nil, fmt.Errorf("container spec: %w", err)
	}
	mem := agentspec.MemoryOrDefault(s.MemoryLimit).Bytes()
	if mem < agentspec.MinMemoryBytes {
		return nil, nil, nil, fmt.Errorf("container spec: memory limit %q is below Docker's minimum of %s", s.MemoryLimit, agentspec.MinMemoryLimitText)
	}
	pids := s.PidsLimit
	if pids <= 0 {
		pids = agentspec.DefaultPidsLimit
	}
	user, err := s.uidGid()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("container spec: %w", err)
	}
	cmd := s.Command
	if len(cmd) == 0 {
		cmd = DefaultCommand
	}
	netMode, endpoints, err := s.networking()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("container spec: %w", err)
	}
	seccompProfile, err := MessageSeccompProfile()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("container spec: %w", err)
	}

	env := []string{"HOME=" + WorkspaceDir, "TMPDIR=/tmp"}
	keys := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		// A key holding "=" would set another variable (HOME among them).
		if !envNameRe.MatchString(k) || strings.ContainsRune(v, 0) {
			return nil, nil, nil, fmt.Errorf("container spec: env %q: want a variable name and a value without NUL", k)
		}
		if k == "HOME" || k == "TMPDIR" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+s.Env[k])
	}

	// Docker copies the image's /tmp mode and owner onto the tmpfs (so an
	// image with a 0755 /tmp would leave it unwritable); owning it by the
	// container user makes it writable whatever the image says. Docker adds
	// noexec unless exec is asked for.
	uid, gid, _ := strings.Cut(user, ":")
	exec := "exec"
	if s.TmpNoexec {
		exec = "noexec"
	}
	tmpOpts := "rw," + exec + ",nosuid,nodev,size=" + agentspec.TmpSize + ",mode=1777,uid=" + uid + ",gid=" + gid

	labels := engine.Labels(Component, map[string]string{"agent": s.AgentID, "message": messageID})
	cfg := &container.Config{
		Image:      s.Image,
		Entrypoint: strslice.StrSlice(cmd),
		Cmd:        nil,
		User:       user,
		Env:        env,
		WorkingDir: WorkspaceDir,
		Hostname:   "agent",
		Labels:     labels,
		// The request goes in on stdin once; closing it ends the input.
		OpenStdin:    true,
		StdinOnce:    true,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Tty:          false,
		// No ExposedPorts, no healthcheck: the container is a one-shot process.
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
	}
	hc := &container.HostConfig{
		Privileged:     false,
		ReadonlyRootfs: true,
		CapDrop:        strslice.StrSlice{"ALL"},
		CapAdd:         nil,
		SecurityOpt:    []string{"no-new-privileges:true", "seccomp=" + string(seccompProfile)},
		// Private namespaces for everything; "none" IPC also leaves out the
		// writable /dev/shm, so /workspace and /tmp are the only writable paths.
		IpcMode:      container.IPCModeNone,
		PidMode:      "",
		UTSMode:      "",
		UsernsMode:   "",
		CgroupnsMode: container.CgroupnsModePrivate,
		NetworkMode:  netMode,
		// The reply must not be kept by a log driver.
		LogConfig:     container.LogConfig{Type: "none"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// Removed explicitly, after the exit state (OOM, exit code) is read.
		AutoRemove: false,
		// Under memory pressure these die before the host's own processes.
		OomScoreAdj: 500,
		Runtime:     s.Runtime,
		Resources: container.Resources{
			Memory:     mem,
			MemorySwap: mem,
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: 1024, Hard: 4096},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
		Mounts: []mount.Mount{{
			Type:        mount.TypeBind,
			Source:      s.Workspace,
			Target:      WorkspaceDir,
			ReadOnly:    false,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		}},
		Tmpfs: map[string]string{"/tmp": tmpOpts},
	}
	if s.RelayDir != "" {
		if err := CheckHostDir(s.RelayDir); err != nil {
			return nil, nil, nil, fmt.Errorf("container spec: relay dir %w", err)
		}
		// Read-only: connecting to a socket needs no write to the mount,
		// and the sandbox cannot swap the socket for something else.
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      s.RelayDir,
			Target:      RelayMountDir,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
	if len(s.Networks) > 0 && len(s.DNS) > 0 {
		// No search domain: a bare name is the engine's to answer, never
		// the host's domain's.
		hc.DNS, hc.DNSSearch = agentspec.AddrStrings(s.DNS), []string{"."}
	}
	return cfg, hc, &network.NetworkingConfig{EndpointsConfig: endpoints}, nil
}

// networking returns the network mode and the create-time endpoint.
func (s Spec) networking() (container.NetworkMode, map[string]*network.EndpointSettings, error) {
	if len(s.Networks) > 0 {
		for _, n := range s.Networks {
			switch n {
			case "", "host", "default":
				return "", nil, fmt.Errorf("network %q cannot be a named network", n)
			}
			if strings.HasPrefix(n, "container:") {
				return "", nil, fmt.Errorf("network %q would share another container's namespace", n)
			}
		}
		return container.NetworkMode(s.Networks[0]), map[string]*network.EndpointSettings{s.Networks[0]: {}}, nil
	}
	switch s.Network {
	case "", "none":
		return "none", nil, nil
	case "bridge":
		return ManagedBridge, map[string]*network.EndpointSettings{ManagedBridge: {}}, nil
	default:
		return "", nil, fmt.Errorf("network %q: want \"none\", \"bridge\", or named networks", s.Network)
	}
}
