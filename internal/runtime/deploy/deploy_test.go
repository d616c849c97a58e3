package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/mount"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

func TestParseListen(t *testing.T) {
	good := map[string]Listener{
		"unix:///run/meepa/a.sock": {Unix: "/run/meepa/a.sock"},
		"127.0.0.1:8080":           {Port: 8080},
		"localhost:1":              {Port: 1},
	}
	for in, want := range good {
		got, err := ParseListen(in)
		if err != nil || got != want {
			t.Errorf("ParseListen(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0.0.0.0:80", "10.0.0.1:80", ":80", "127.0.0.1:0", "127.0.0.1:70000",
		"unix://rel.sock", "unix:///a/../b.sock", "http://127.0.0.1:80", "127.0.0.1",
		"unix:///runner.sock", "unix:///run/runner.sock", "unix:///var/run/runner.sock"} {
		if _, err := ParseListen(bad); err == nil {
			t.Errorf("ParseListen(%q) accepted", bad)
		}
	}
	if e := (Listener{Unix: "/x.sock"}).Endpoint(); e != "unix:///x.sock" {
		t.Error(e)
	}
	if e := (Listener{Port: 9}).Endpoint(); e != "http://127.0.0.1:9" {
		t.Error(e)
	}
}

func sampleConfig() agentspec.Config {
	return agentspec.Config{
		AgentID: "a1", Workspace: "/s/agents/a1", Listen: "unix:///s/runners/a1/run/runner.sock", Token: "tok",
		Container: agentspec.ContainerMode{Enabled: true, Image: "img:1", MemoryLimit: agentspec.SizeOf(512 << 20), TimeoutSeconds: 300, Network: "bridge"},
		LLM:       agentspec.LLMConfig{Provider: "openai", APIKey: "sk-1"},
		Secrets:   map[string]string{"A": "1", "B": "2"},
	}
}

func TestConfigHash(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	s := agentspec.DeploySettings{Mode: "container", Image: "img:1"}
	base := agentspec.ConfigHash(sampleConfig(), s, key)
	if base != agentspec.ConfigHash(sampleConfig(), s, key) {
		t.Fatal("hash not stable")
	}
	changes := map[string]func(c *agentspec.Config, s *agentspec.DeploySettings, k *[]byte){
		"api key": func(c *agentspec.Config, _ *agentspec.DeploySettings, _ *[]byte) { c.LLM.APIKey = "sk-2" },
		"token":   func(c *agentspec.Config, _ *agentspec.DeploySettings, _ *[]byte) { c.Token = "tok2" },
		"secret value": func(c *agentspec.Config, _ *agentspec.DeploySettings, _ *[]byte) {
			c.Secrets = map[string]string{"A": "1", "B": "3"}
		},
		"secret name": func(c *agentspec.Config, _ *agentspec.DeploySettings, _ *[]byte) {
			c.Secrets = map[string]string{"A": "1", "C": "2"}
		},
		"memory": func(c *agentspec.Config, _ *agentspec.DeploySettings, _ *[]byte) {
			c.Container.MemoryLimit = agentspec.SizeOf(1 << 30)
		},
		"image": func(_ *agentspec.Config, s *agentspec.DeploySettings, _ *[]byte) { s.Image = "img:2" },
		"mode":  func(_ *agentspec.Config, s *agentspec.DeploySettings, _ *[]byte) { s.Mode = "external" },
		"key": func(_ *agentspec.Config, _ *agentspec.DeploySettings, k *[]byte) {
			*k = []byte("another key, also 32 bytes long!")
		},
	}
	for name, f := range changes {
		c, s2, k := sampleConfig(), s, key
		f(&c, &s2, &k)
		if agentspec.ConfigHash(c, s2, k) == base {
			t.Errorf("changing the %s did not change the hash", name)
		}
	}
	// Secrets must not be recoverable from the plain part: the same config
	// with other secrets under another key must not collide with a hash of
	// the secrets alone; simplest check: the hash does not contain them.
	if strings.Contains(base, "sk-1") {
		t.Fatal("secret in hash")
	}
}

func TestPrepareAndFiles(t *testing.T) {
	l := LayoutFor(t.TempDir(), "a1")
	k1, err := Prepare(l)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := Prepare(l)
	if err != nil || string(k1) != string(k2) {
		t.Fatalf("the hash key changed between Prepare calls: %v", err)
	}
	for _, d := range []string{l.Dir, l.SocketDir, l.JournalDir} {
		st, _ := os.Stat(d)
		if st.Mode().Perm() != 0o700 {
			t.Errorf("%s mode %o", d, st.Mode().Perm())
		}
	}
	c := sampleConfig()
	if err := WriteConfig(l, &c); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{l.ConfigFile, l.HashKeyFile} {
		st, _ := os.Stat(f)
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %o", f, st.Mode().Perm())
		}
	}
	back, err := agentspec.LoadConfig(l.ConfigFile)
	if err != nil || back.LLM.APIKey != "sk-1" {
		t.Fatalf("config round trip: %v", err)
	}
	if err := RemoveFiles(l); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.Dir); !os.IsNotExist(err) {
		t.Fatal("runner dir left")
	}
	if err := RemoveFiles(Layout{Dir: "/etc"}); err == nil {
		t.Fatal("RemoveFiles accepted a foreign dir")
	}
	// Paths whose parent is named runners but that are not an agent's
	// directory; a canary beside them shows nothing was removed.
	base := t.TempDir()
	canary := filepath.Join(base, "runners", "keep")
	if err := os.MkdirAll(canary, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{base + "/runners/..", base + "/runners/.", base + "/runners/A B", "runners/a1"} {
		if err := RemoveFiles(Layout{Dir: bad}); err == nil {
			t.Errorf("RemoveFiles accepted %q", bad)
		}
	}
	if _, err := os.Stat(canary); err != nil {
		t.Errorf("canary gone: %v", err)
	}
}

// TestSpecHardening checks the runner container against the CIS Docker
// Benchmark section 5 items that apply to a service that must hold the
// Docker socket.
func TestSpecHardening(t *testing.T) {
	state := t.TempDir()
	l := LayoutFor(state, "a1")
	d := Deployment{
		AgentID: "a1", Image: "img:1", Layout: l, Listener: Listener{Unix: l.Socket},
		Workspace: filepath.Join(state, "agents", "a1"), User: "1000:1000", GroupAdd: []string{"998"},
		ConfigHash: "h1", StopTimeout: 40 * time.Second, DockerSocket: "/var/run/docker.sock",
	}
	cfg, hc, _ := Spec(d)
	if hc.Privileged {
		t.Error("privileged")
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
		t.Errorf("caps: drop %v add %v", hc.CapDrop, hc.CapAdd)
	}
	if !hc.ReadonlyRootfs {
		t.Error("rootfs writable")
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("security opts %v", hc.SecurityOpt)
	}
	for _, o := range hc.SecurityOpt {
		if strings.Contains(o, "unconfined") {
			t.Errorf("security opt %q", o)
		}
	}
	if hc.Memory != 256<<20 || hc.MemorySwap != hc.Memory || hc.PidsLimit == nil || *hc.PidsLimit != 256 {
		t.Errorf("limits: mem %d swap %d pids %v", hc.Memory, hc.MemorySwap, hc.PidsLimit)
	}
	if hc.NetworkMode != "none" || hc.PidMode != "" || hc.IpcMode != "" || hc.UTSMode != "" || hc.UsernsMode != "" {
		t.Errorf("namespaces: net %q pid %q ipc %q uts %q", hc.NetworkMode, hc.PidMode, hc.IpcMode, hc.UTSMode)
	}
	if hc.RestartPolicy.Name != "unless-stopped" {
		t.Errorf("restart %q", hc.RestartPolicy.Name)
	}
	if cfg.User != "1000:1000" || !slices.Equal(hc.GroupAdd, []string{"998"}) {
		t.Errorf("user %q groups %v", cfg.User, hc.GroupAdd)
	}
	if cfg.StopTimeout == nil || *cfg.StopTimeout != 40 {
		t.Errorf("stop timeout %v", cfg.StopTimeout)
	}
	if !slices.Equal(cfg.Cmd, []string{"serve", "--config", l.ConfigFile}) || !slices.Equal(cfg.Entrypoint, []string{"agent-runner"}) {
		t.Errorf("command %v %v", cfg.Entrypoint, cfg.Cmd)
	}
	if cfg.Labels[engine.LabelManagedBy] != engine.ManagedByValue || cfg.Labels[sandbox.LabelAgent] != "a1" || cfg.Labels[LabelConfigHash] != "h1" ||
		cfg.Labels[engine.LabelComponent] != ComponentRunner {
		t.Errorf("labels %v", cfg.Labels)
	}
	type m struct {
		src, dst string
		ro       bool
	}
	var got []m
	for _, mt := range hc.Mounts {
		if mt.Type != mount.TypeBind {
			t.Errorf("mount type %s", mt.Type)
		}
		got = append(got, m{mt.Source, mt.Target, mt.ReadOnly})
	}
	want := []m{
		{l.Dir, l.Dir, true},
		{l.SocketDir, l.SocketDir, false},
		{l.JournalDir, l.JournalDir, false},
		{d.Workspace, d.Workspace, false},
		{"/var/run/docker.sock", "/var/run/docker.sock", false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("mounts\n got %v\nwant %v", got, want)
	}
	if len(hc.Binds) != 0 || len(hc.PortBindings) != 0 {
		t.Errorf("binds %v ports %v", hc.Binds, hc.PortBindings)
	}
	if hc.Tmpfs["/tmp"] == "" {
		t.Error("no /tmp tmpfs")
	}

	// TCP: published on the host's loopback only; host mode paths at the
	// same path, read-only for allow_read, and no Docker socket.
	d.DockerSocket = ""
	d.Listener = Listener{Port: 8123}
	d.Network = "bridge"
	d.HostPaths = []HostPath{{Path: "/srv/ro", ReadOnly: true}, {Path: "/srv/rw"}}
	_, hc, _ = Spec(d)
	pb := hc.PortBindings["8123/tcp"]
	if len(pb) != 1 || pb[0].HostIP != "127.0.0.1" || pb[0].HostPort != "8123" {
		t.Errorf("port bindings %v", hc.PortBindings)
	}
	n := len(hc.Mounts)
	if hc.Mounts[n-2].Target != "/srv/ro" || !hc.Mounts[n-2].ReadOnly || hc.Mounts[n-1].Target != "/srv/rw" || hc.Mounts[n-1].ReadOnly {
		t.Errorf("host paths %v", hc.Mounts[n-2:])
	}
	for _, mt := range hc.Mounts {
		if strings.HasSuffix(mt.Source, "docker.sock") {
			t.Errorf("host mode mounts the Docker socket: %v", mt)
		}
	}
}

func TestContainerName(t *testing.T) {
	if ContainerName("a1") != "meepa-runner-a1" {
		t.Fatal(ContainerName("a1"))
	}
}
