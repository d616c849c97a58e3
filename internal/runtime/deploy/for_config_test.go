package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

func TestForConfigContainerMode(t *testing.T) {
	sock := t.TempDir() + "/docker.sock"
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := agentspec.Config{AgentID: "a1", Container: agentspec.ContainerMode{Enabled: true, MemoryLimit: agentspec.SizeOf(1 << 30), PidsLimit: 64, TimeoutSeconds: 60},
		FileAccess: landlock.FileAccess{AllowRead: []string{"/srv/a"}, AllowNetwork: true}}
	p := Placement{Image: "img:1", Layout: LayoutFor("/s", "a1"), Listener: Listener{Unix: "/s/run.sock"}, Workspace: "/s/agents/a1",
		ConfigHash: "h", DockerSocket: sock}
	d, err := ForConfig(c, p)
	if err != nil {
		t.Fatal(err)
	}
	if d.AgentID != "a1" || d.Image != "img:1" || d.Workspace != "/s/agents/a1" || d.ConfigHash != "h" || d.Layout != p.Layout {
		t.Errorf("identity fields: %+v", d)
	}
	if d.DockerSocket != sock || len(d.GroupAdd) != 1 {
		t.Errorf("container mode needs the socket and its group: %q %v", d.DockerSocket, d.GroupAdd)
	}
	if (os.Getuid() == 0) != slices.Contains(d.CapAdd, "CHOWN") {
		t.Errorf("CapAdd %v as uid %d", d.CapAdd, os.Getuid())
	}
	// A unix listener and per-message containers: the runner itself only
	// talks to the daemon. Host-mode settings do not leak in.
	if d.Network != "none" || d.Networks != nil || d.HostPaths != nil || d.SecurityOpt != nil || d.Memory != 0 || d.PidsLimit != 0 {
		t.Errorf("container-mode runner: %+v", d)
	}
	if d.StopTimeout != 65*time.Second {
		t.Errorf("stop timeout %v", d.StopTimeout)
	}
	p.Listener = Listener{Port: 8701}
	if d, _ := ForConfig(c, p); d.Network != RunnerNetwork {
		t.Errorf("a TCP listener needs a published port: network %q", d.Network)
	}
}

func TestForConfigHostMode(t *testing.T) {
	c := agentspec.Config{AgentID: "a1", Container: agentspec.ContainerMode{MemoryLimit: agentspec.SizeOf(512 << 20), PidsLimit: 64, TimeoutSeconds: 3600},
		FileAccess: landlock.FileAccess{AllowRead: []string{"/srv/a"}, AllowReadWrite: []string{"/srv/b"}}}
	p := Placement{Image: "img:1", Layout: LayoutFor("/s", "a1"), Listener: Listener{Unix: "/s/run.sock"}, DockerSocket: "/var/run/docker.sock"}
	d, err := ForConfig(c, p)
	if err != nil {
		t.Fatal(err)
	}
	if d.DockerSocket != "" || d.GroupAdd != nil {
		t.Errorf("a host-mode runner gets no Docker socket: %+v", d)
	}
	// As root, what switching to the agent's own uid takes; else nothing.
	if root := os.Getuid() == 0; root != slices.Equal(d.CapAdd, []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"}) || !root && d.CapAdd != nil {
		t.Errorf("host-mode runner as uid %d: CapAdd %v", os.Getuid(), d.CapAdd)
	}
	c.FileAccess.Unrestricted = true
	if d, _ := ForConfig(c, p); d.CapAdd != nil {
		t.Errorf("an unrestricted host-mode runner keeps its own uid: CapAdd %v", d.CapAdd)
	}
	c.FileAccess.Unrestricted = false
	if d.Memory != (512+256)<<20 || d.PidsLimit != 64+256 {
		t.Errorf("limits: memory %d pids %d", d.Memory, d.PidsLimit)
	}
	want := []HostPath{{Path: "/srv/a", ReadOnly: true}, {Path: "/srv/b"}}
	if !slices.Equal(d.HostPaths, want) {
		t.Errorf("host paths %+v, want %+v", d.HostPaths, want)
	}
	if d.Network != "none" {
		t.Errorf("allow_network = false: network %q", d.Network)
	}
	if len(d.SecurityOpt) != 1 || !strings.HasPrefix(d.SecurityOpt[0], "seccomp=") || !strings.Contains(d.SecurityOpt[0], "landlock_create_ruleset") {
		t.Errorf("restricted host mode needs the Landlock seccomp profile: %.80q", d.SecurityOpt)
	}
	if d.StopTimeout != 5*time.Minute {
		t.Errorf("stop timeout %v, want the 5m cap", d.StopTimeout)
	}

	c.FileAccess.Unrestricted = true
	if d, _ := ForConfig(c, p); d.SecurityOpt != nil || d.Network != sandbox.ManagedBridge {
		t.Errorf("unrestricted: %v %q, want the managed bridge", d.SecurityOpt, d.Network)
	}
	c.FileAccess.Unrestricted = false
	// Tools with network share the runner's: the managed bridge, never
	// meepa-runners, from which the host's services and private and
	// link-local addresses are open.
	c.FileAccess.AllowNetwork = true
	if d, _ := ForConfig(c, p); d.Network != sandbox.ManagedBridge {
		t.Errorf("allow_network = true: network %q, want the managed bridge", d.Network)
	}
	c.FileAccess.AllowNetwork = false
	c.Container.Networks = []string{"tg-llmnet", "tg-fetchnet"}
	if d, _ := ForConfig(c, p); !slices.Equal(d.Networks, c.Container.Networks) || d.Network != "" {
		t.Errorf("a host-mode role joins the role's networks itself: %v %q", d.Networks, d.Network)
	}
}

// A deny inside an allowed tree is covered by the runner container's own
// mounts: an empty read-only tmpfs over a directory, the empty file over a
// file; a missing path or a symlink is left to the runner's expansion.
func TestForConfigCoversDeniesInsideAllows(t *testing.T) {
	root := t.TempDir()
	rw := filepath.Join(root, "rw")
	for _, d := range []string{filepath.Join(rw, "secret"), filepath.Join(root, "elsewhere")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rw, "key.txt"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "elsewhere"), filepath.Join(rw, "link")); err != nil {
		t.Fatal(err)
	}
	c := agentspec.Config{AgentID: "a1", Container: agentspec.ContainerMode{MemoryLimit: agentspec.SizeOf(512 << 20), PidsLimit: 64},
		FileAccess: landlock.FileAccess{AllowReadWrite: []string{rw}, Deny: []string{
			filepath.Join(rw, "secret"), filepath.Join(rw, "key.txt"), filepath.Join(rw, "later"),
			filepath.Join(rw, "link"), filepath.Join(root, "elsewhere"),
		}}}
	p := Placement{Image: "img:1", Layout: LayoutFor("/s", "a1"), Listener: Listener{Unix: "/s/run.sock"}}
	d, err := ForConfig(c, p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Cover{{Path: filepath.Join(rw, "secret"), Dir: true}, {Path: filepath.Join(rw, "key.txt")}}
	if !slices.Equal(d.Covers, want) {
		t.Fatalf("covers %+v, want %+v", d.Covers, want)
	}
	cfg, hc, _ := Spec(d)
	wantEnv := fmt.Sprintf(`%s=[%q,%q]`, sandbox.CoversEnv, filepath.Join(rw, "secret"), filepath.Join(rw, "key.txt"))
	if !slices.Contains(cfg.Env, wantEnv) {
		t.Errorf("the runner is not told its covers: env %q, want %q", cfg.Env, wantEnv)
	}
	if got := hc.Tmpfs[filepath.Join(rw, "secret")]; !strings.HasPrefix(got, "ro,") {
		t.Errorf("directory cover: tmpfs options %q, want read-only", got)
	}
	found := false
	for _, m := range hc.Mounts {
		if m.Target == filepath.Join(rw, "key.txt") {
			found = m.Source == p.Layout.EmptyFile && m.ReadOnly
		}
	}
	if !found {
		t.Errorf("file cover: no read-only bind of %s over key.txt in %+v", p.Layout.EmptyFile, hc.Mounts)
	}

	c.FileAccess.Unrestricted, c.FileAccess.Deny = true, nil
	if d, _ := ForConfig(c, p); d.Covers != nil {
		t.Errorf("unrestricted: covers %+v", d.Covers)
	}
}

func TestDenyWarnings(t *testing.T) {
	rw := t.TempDir()
	if err := os.Mkdir(filepath.Join(rw, "secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := agentspec.Agent{Config: agentspec.Config{FileAccess: landlock.FileAccess{AllowReadWrite: []string{rw},
		Deny: []string{filepath.Join(rw, "secret"), filepath.Join(rw, "later")}}}}
	// The runner container covers what exists; only the missing path is
	// expanded around.
	if w := DenyWarnings(a); len(w) != 1 || !strings.Contains(w[0], "later") {
		t.Errorf("container runner: %q", w)
	}
	a.Meta.Deployment = agentspec.ModeExternal
	if w := DenyWarnings(a); len(w) != 2 {
		t.Errorf("external runner: %q, want both denies", w)
	}
	a.Config.Container.Enabled = true
	if w := DenyWarnings(a); w != nil {
		t.Errorf("container mode has no host file rules: %q", w)
	}
}

// Only an external runner leaves host-mode tools' network uncontained; a
// runner container joins the managed bridge (TestForConfigHostMode).
func TestHostNetworkWarning(t *testing.T) {
	a := agentspec.Agent{Meta: agentspec.Meta{Deployment: agentspec.ModeExternal}}
	a.Config.FileAccess.AllowNetwork = true
	if w := HostNetworkWarning(a); !strings.Contains(w, "127.0.0.1") || !strings.Contains(w, "allow_network = false") {
		t.Errorf("external, allow_network: %q", w)
	}
	for name, change := range map[string]func(*agentspec.Agent){
		"no network":            func(a *agentspec.Agent) { a.Config.FileAccess.AllowNetwork = false },
		"runner in a container": func(a *agentspec.Agent) { a.Meta.Deployment = agentspec.ModeContainer },
		"container mode":        func(a *agentspec.Agent) { a.Config.Container.Enabled = true },
		"threegate role":        func(a *agentspec.Agent) { a.Meta.ThreegateNetwork = "tg" },
	} {
		b := a
		change(&b)
		if w := HostNetworkWarning(b); w != "" {
			t.Errorf("%s: %q", name, w)
		}
	}
}

// Check warns, on container_mode.network, that a gVisor agent on the
// managed bridge resolves no names; runc there, or gVisor without a
// network or in a topology, is not warned.
func TestCheckWarnsRunscOnTheBridge(t *testing.T) {
	agentWith := func(runtime, network, topology string) agentspec.Agent {
		return agentspec.Agent{
			Config: agentspec.Config{AgentID: "w", Container: agentspec.ContainerMode{Enabled: true, Runtime: runtime, Network: network}},
			Meta:   agentspec.Meta{ThreegateNetwork: topology},
		}
	}
	ws, err := (&Service{}).Check(agentWith("runsc", "bridge", ""))
	if err != nil || len(ws) != 1 || ws[0].Topic != TopicRunscNames || ws[0].Field != "container_mode.network" || !strings.Contains(ws[0].Detail, "127.0.0.11") {
		t.Errorf("runsc on the bridge: %+v, %v", ws, err)
	}
	for _, a := range []agentspec.Agent{agentWith("runc", "bridge", ""), agentWith("runsc", "none", ""), agentWith("runsc", "bridge", "tg")} {
		if ws, err := (&Service{}).Check(a); err != nil || len(ws) != 0 {
			t.Errorf("%+v: %+v, %v", a.Config.Container, ws, err)
		}
	}
}
