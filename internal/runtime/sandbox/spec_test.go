package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

func testSpec() Spec {
	return Spec{AgentID: "a1", Workspace: "/srv/agents/a1", Image: "img:1"}
}

// checkCIS checks a container's config against the CIS Docker Benchmark
// section 5 items that HardenedSpec answers for. It takes the config as the
// daemon reports it too (from ContainerInspect), so one list serves both the
// spec function and a running container.
func checkCIS(t *testing.T, cfg *container.Config, hc *container.HostConfig, mounts []mount.Mount, workspace string) {
	t.Helper()
	// 5.4 not privileged.
	if hc.Privileged {
		t.Error("5.4: privileged")
	}
	// 5.3 capabilities: all dropped, none added.
	if !slices.Equal([]string(hc.CapDrop), []string{"ALL"}) {
		t.Errorf("5.3: CapDrop = %v, want [ALL]", hc.CapDrop)
	}
	if len(hc.CapAdd) != 0 {
		t.Errorf("5.3: CapAdd = %v, want none", hc.CapAdd)
	}
	// 5.12 read-only root filesystem.
	if !hc.ReadonlyRootfs {
		t.Error("5.12: root filesystem is writable")
	}
	// 5.10 memory limit, swap equal to memory.
	if hc.Memory != 512<<20 || hc.MemorySwap != hc.Memory {
		t.Errorf("5.10: Memory=%d MemorySwap=%d, want 512MiB both", hc.Memory, hc.MemorySwap)
	}
	// 5.28 pids limit.
	if hc.PidsLimit == nil || *hc.PidsLimit != agentspec.DefaultPidsLimit {
		t.Errorf("5.28: PidsLimit = %v, want %d", hc.PidsLimit, agentspec.DefaultPidsLimit)
	}
	// 5.21 seccomp not disabled; 5.1 AppArmor not disabled; 5.25 no-new-privileges.
	nnp := false
	for _, o := range hc.SecurityOpt {
		if strings.Contains(o, "unconfined") {
			t.Errorf("5.1/5.21: security opt %q unconfines the container", o)
		}
		if o == "no-new-privileges:true" || o == "no-new-privileges" {
			nnp = true
		}
	}
	if !nnp {
		t.Errorf("5.25: no-new-privileges missing from %v", hc.SecurityOpt)
	}
	// 5.9, 5.15, 5.16, 5.20, 5.30 no host network, PID, IPC, UTS, user namespaces.
	if hc.NetworkMode.IsHost() {
		t.Error("5.9: host network")
	}
	if hc.PidMode.IsHost() {
		t.Error("5.15: host PID namespace")
	}
	if hc.IpcMode.IsHost() || hc.IpcMode.IsShareable() || hc.IpcMode.IsContainer() {
		t.Errorf("5.16: IPC mode %q", hc.IpcMode)
	}
	if hc.UTSMode.IsHost() {
		t.Error("5.20: host UTS namespace")
	}
	if hc.UsernsMode.IsHost() {
		t.Error("5.30: host user namespace")
	}
	if hc.CgroupnsMode.IsHost() {
		t.Error("cgroup namespace: host")
	}
	// 5.17 no host devices.
	if len(hc.Devices) != 0 {
		t.Errorf("5.17: devices %v", hc.Devices)
	}
	// 5.5, 5.31 exactly the workspace bind and nothing else of the host (so
	// no docker.sock); no Binds, no volumes.
	if len(hc.Binds) != 0 || len(hc.VolumesFrom) != 0 {
		t.Errorf("5.5: Binds=%v VolumesFrom=%v", hc.Binds, hc.VolumesFrom)
	}
	if len(mounts) != 1 {
		t.Fatalf("5.5: mounts = %+v, want exactly the workspace", mounts)
	}
	m := mounts[0]
	if m.Type != mount.TypeBind || m.Source != workspace || m.Target != WorkspaceDir || m.ReadOnly {
		t.Errorf("5.5: mount %+v, want rw bind %s -> /workspace", m, workspace)
	}
	if strings.Contains(m.Source, "docker.sock") {
		t.Error("5.31: docker socket mounted")
	}
	// 5.19 mount propagation not shared.
	if m.BindOptions != nil && (m.BindOptions.Propagation == mount.PropagationShared || m.BindOptions.Propagation == mount.PropagationRShared) {
		t.Errorf("5.19: propagation %s", m.BindOptions.Propagation)
	}
	if tmp := hc.Tmpfs["/tmp"]; len(hc.Tmpfs) != 1 || !strings.Contains(tmp, "size=256m") || !strings.Contains(tmp, "nosuid") || !strings.Contains(tmp, fmt.Sprintf(",uid=%d,gid=%d", agentspec.AgentUID(cfg.Labels[LabelAgent]), agentspec.AgentUID(cfg.Labels[LabelAgent]))) {
		t.Errorf("tmpfs = %v, want only /tmp of 256m nosuid", hc.Tmpfs)
	}
	// 4.1 a non-root user: the agent's own, never nobody, whom the host's
	// unprivileged daemons share.
	if want := agentspec.AgentUser(cfg.Labels[LabelAgent]).String(); cfg.User != want || strings.HasPrefix(cfg.User, "65534") {
		t.Errorf("4.1: user %q, want the agent's own %s", cfg.User, want)
	}
	// 5.21 the product's own seccomp profile, whatever the daemon's default
	// allows: none of MessageDenied (io_uring first) is allowed by any rule.
	checkSeccomp(t, hc.SecurityOpt)
	// 5.14 no restart loop; the reply is not kept by a log driver.
	if hc.RestartPolicy.Name != "" && hc.RestartPolicy.Name != container.RestartPolicyDisabled {
		t.Errorf("5.14: restart policy %q", hc.RestartPolicy.Name)
	}
	if hc.LogConfig.Type != "none" {
		t.Errorf("log driver %q keeps the reply; want none", hc.LogConfig.Type)
	}
	// 5.8/5.13 no published ports.
	if len(hc.PortBindings) != 0 || hc.PublishAllPorts || len(cfg.ExposedPorts) != 0 {
		t.Errorf("5.8: ports %v %v", hc.PortBindings, cfg.ExposedPorts)
	}
	for _, e := range []string{"HOME=/workspace", "TMPDIR=/tmp"} {
		if !slices.Contains(cfg.Env, e) {
			t.Errorf("env %v lacks %s", cfg.Env, e)
		}
	}
	if cfg.WorkingDir != WorkspaceDir {
		t.Errorf("working dir %q", cfg.WorkingDir)
	}
	if !cfg.OpenStdin || !cfg.StdinOnce {
		t.Error("stdin not open-once")
	}
	if cfg.Labels[engine.LabelManagedBy] != engine.ManagedByValue || cfg.Labels[engine.LabelComponent] != Component || cfg.Labels[LabelAgent] == "" {
		t.Errorf("labels %v", cfg.Labels)
	}
}

func TestHardenedSpecCIS(t *testing.T) {
	s := testSpec()
	cfg, hc, nc, err := HardenedSpec(s, "m-1")
	if err != nil {
		t.Fatal(err)
	}
	checkCIS(t, cfg, hc, hc.Mounts, s.Workspace)
	if hc.NetworkMode != "none" || len(nc.EndpointsConfig) != 0 {
		t.Errorf("default network: mode %q endpoints %v, want none", hc.NetworkMode, nc.EndpointsConfig)
	}
	if cfg.Labels[LabelAgent] != "a1" || cfg.Labels[LabelMessage] != "m-1" {
		t.Errorf("labels %v", cfg.Labels)
	}
	if !slices.Equal([]string(cfg.Entrypoint), DefaultCommand) {
		t.Errorf("entrypoint %v", cfg.Entrypoint)
	}
	if hc.AutoRemove {
		t.Error("AutoRemove would lose the exit state before it is read")
	}
	if hc.IpcMode != container.IPCModeNone {
		t.Errorf("IPC %q: want none (no writable /dev/shm)", hc.IpcMode)
	}
	for _, e := range cfg.Env {
		if strings.Contains(strings.ToLower(e), "key") || strings.Contains(strings.ToLower(e), "token") {
			t.Errorf("env %q looks like a credential", e)
		}
	}
}

func TestHardenedSpecOptions(t *testing.T) {
	s := testSpec()
	s.MemoryLimit = agentspec.SizeOf(1 << 30)
	s.PidsLimit = 64
	s.Networks = []string{"llmnet", "fetchnet"}
	s.Env = map[string]string{"http_proxy": "http://proxy:3128", "HOME": "/root"}
	s.TmpNoexec = true
	s.Runtime = "runsc"
	cfg, hc, nc, err := HardenedSpec(s, "m")
	if err != nil {
		t.Fatal(err)
	}
	if hc.Memory != 1<<30 || hc.MemorySwap != 1<<30 || *hc.PidsLimit != 64 {
		t.Errorf("limits %d %d %d", hc.Memory, hc.MemorySwap, *hc.PidsLimit)
	}
	if hc.NetworkMode != "llmnet" || len(nc.EndpointsConfig) != 1 || nc.EndpointsConfig["llmnet"] == nil {
		t.Errorf("networks: mode %q endpoints %v, want llmnet at create", hc.NetworkMode, nc.EndpointsConfig)
	}
	if !slices.Contains(cfg.Env, "http_proxy=http://proxy:3128") || !slices.Contains(cfg.Env, "HOME=/workspace") || slices.Contains(cfg.Env, "HOME=/root") {
		t.Errorf("env %v", cfg.Env)
	}
	if !strings.Contains(hc.Tmpfs["/tmp"], ",noexec,") || hc.Runtime != "runsc" {
		t.Errorf("tmpfs %v runtime %q", hc.Tmpfs, hc.Runtime)
	}
	s.Network, s.Networks = "bridge", nil
	if _, hc, _, _ = HardenedSpec(s, "m"); hc.NetworkMode != ManagedBridge {
		t.Errorf("bridge: %q", hc.NetworkMode)
	}
}

func TestHardenedSpecRejects(t *testing.T) {
	for name, mut := range map[string]func(*Spec){
		"nobody named":     func(s *Spec) { s.User, _ = agentspec.ParseUserSpec("65534") },
		"tiny memory":      func(s *Spec) { s.MemoryLimit = agentspec.SizeOf(1 << 20) },
		"host network":     func(s *Spec) { s.Network = "host" },
		"host in networks": func(s *Spec) { s.Networks = []string{"llmnet", "host"} },
		"container net":    func(s *Spec) { s.Networks = []string{"container:x"} },
		"relative ws":      func(s *Spec) { s.Workspace = "ws" },
		"root ws":          func(s *Spec) { s.Workspace = "/" },
		"unclean ws":       func(s *Spec) { s.Workspace = "/srv/agents/a1/../../../var/run" },
		"ws holds socket":  func(s *Spec) { s.Workspace = "/var/run" },
		"ws is /run":       func(s *Spec) { s.Workspace = "/run" },
		"ws is socket":     func(s *Spec) { s.Workspace = "/var/run/docker.sock" },
		"env key with =":   func(s *Spec) { s.Env = map[string]string{"HOME=/etc x": "1"} },
		"env value NUL":    func(s *Spec) { s.Env = map[string]string{"A": "a\x00b"} },
		"no image":         func(s *Spec) { s.Image = "" },
		"no agent":         func(s *Spec) { s.AgentID = "" },
	} {
		s := testSpec()
		mut(&s)
		if _, _, _, err := HardenedSpec(s, "m"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// checkSeccomp finds the one seccomp profile among a container's security
// options and checks it is MessageSeccompProfile: refusing by default, and
// allowing none of MessageDenied under any condition.
func checkSeccomp(t *testing.T, opts []string) {
	t.Helper()
	var profiles []string
	for _, o := range opts {
		if p, ok := strings.CutPrefix(o, "seccomp="); ok {
			profiles = append(profiles, p)
		}
	}
	if len(profiles) != 1 {
		t.Errorf("5.21: %d seccomp profiles in %d security options, want exactly the product's own", len(profiles), len(opts))
		return
	}
	want, err := MessageSeccompProfile()
	if err != nil {
		t.Fatal(err)
	}
	if profiles[0] != string(want) {
		t.Error("5.21: the seccomp profile is not MessageSeccompProfile")
	}
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal([]byte(profiles[0]), &p); err != nil {
		t.Fatalf("5.21: seccomp profile: %v", err)
	}
	if p.DefaultAction != "SCMP_ACT_ERRNO" {
		t.Errorf("5.21: default action %q, want SCMP_ACT_ERRNO", p.DefaultAction)
	}
	denied := MessageDenied()
	for _, n := range []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace", "bpf", "unshare", "keyctl"} {
		if !slices.Contains(denied, n) {
			t.Errorf("5.21: %s is not among the denied syscalls", n)
		}
	}
	allowed := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action == "SCMP_ACT_ALLOW" {
			for _, n := range s.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range denied {
		if allowed[n] {
			t.Errorf("5.21: the profile allows %s", n)
		}
	}
	// Still Docker's default for everything else.
	for _, n := range []string{"read", "write", "execve", "clone", "setsid", "socket"} {
		if !allowed[n] {
			t.Errorf("5.21: the profile does not allow %s", n)
		}
	}
}
