package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// testAgentID is unique to this test process: a runner sweeps the empty
// pids cgroups of its agent id at start, and two test runs on one machine
// (two checkouts) must not sweep each other's.
var testAgentID = fmt.Sprintf("tf-acc-host-%d", os.Getpid())

// These tests run the real agent-runner under real Landlock (unprivileged
// is enough); they need Linux with Landlock ABI 4 or newer.
func requireLandlock(t *testing.T, abi int) {
	t.Helper()
	if got := landlock.DetectABI(); got < abi {
		t.Skipf("kernel Landlock ABI %d < %d", got, abi)
	}
}

func newHost(t *testing.T, fa landlock.FileAccess) (*Host, string) {
	t.Helper()
	ws := mkdir(t, testutil.SharedTempDir(t), "workspace")
	h, err := NewHost(HostOptions{
		AgentID:      testAgentID,
		Workspace:    ws,
		FileAccess:   fa,
		RunnerBinary: testutil.RunnerBinary(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, ws
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// shell sends "!sh cmd" through the host backend and returns the shell's
// exit code and output as the offline provider reports them.
func shell(t *testing.T, h *Host, cmd string) (int, string) {
	t.Helper()
	req, err := json.Marshal(agent.Request{
		AgentID: testAgentID,
		Message: agent.Message{ID: "m1", Text: agent.OfflineShellPrefix + cmd},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Run(context.Background(), Job{MessageID: "m1", Stdin: req, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("run %q: %v", cmd, err)
	}
	var r agent.Reply
	if err := json.Unmarshal(out.Stdout, &r); err != nil {
		t.Fatalf("run %q: exit %d, reply %q: %v; stderr: %s", cmd, out.ExitCode, out.Stdout, err, out.StderrTail)
	}
	if r.ErrorKind != "" {
		t.Fatalf("run %q: %s: %s", cmd, r.ErrorKind, r.Error)
	}
	var code int
	var rest string
	if _, err := fmt.Sscanf(r.Reply, "exit %d", &code); err != nil {
		t.Fatalf("run %q: reply %q", cmd, r.Reply)
	}
	if _, after, ok := strings.Cut(r.Reply, "\n"); ok {
		rest = after
	}
	return code, rest
}

func expectOK(t *testing.T, h *Host, cmd string) string {
	t.Helper()
	code, out := shell(t, h, cmd)
	if code != 0 {
		t.Errorf("%q: exit %d, want 0; output: %s", cmd, code, out)
	}
	return out
}

func expectDenied(t *testing.T, h *Host, cmd string) {
	t.Helper()
	code, out := shell(t, h, cmd)
	if code == 0 {
		t.Errorf("%q: exit 0, want a failure; output: %s", cmd, out)
	} else if !strings.Contains(strings.ToLower(out), "denied") && !strings.Contains(out, "not permitted") {
		t.Errorf("%q: exit %d, want permission denied; output: %s", cmd, code, out)
	}
}

// expectFails wants cmd to fail without printing leak.
func expectFails(t *testing.T, h *Host, cmd, leak string) {
	t.Helper()
	code, out := shell(t, h, cmd)
	if code == 0 || (leak != "" && strings.Contains(out, leak)) {
		t.Errorf("%q: exit %d, output %q; want a failure showing nothing", cmd, code, out)
	}
}

// giveToAgent makes paths owned by the test agent's uid when the runner
// (this test) is root and so runs the agent under that uid.
func giveToAgent(t *testing.T, paths ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	uid := agentspec.AgentUID(testAgentID)
	for _, p := range paths {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHostFileAccess(t *testing.T) {
	requireLandlock(t, landlock.MinNetABI)
	root := testutil.SharedTempDir(t)
	a := mkdir(t, root, "a")
	b := mkdir(t, root, "b")
	secret := mkdir(t, b, "secret")
	writeFile(t, filepath.Join(a, "data.txt"), "read-me")
	writeFile(t, filepath.Join(b, "existing.txt"), "b-data")
	mkdir(t, b, "sub")
	writeFile(t, filepath.Join(secret, "key"), "top-secret")
	other := mkdir(t, root, "other-agent-workspace")
	writeFile(t, filepath.Join(other, "MEMORY.md"), "not yours")
	home := mkdir(t, root, "home")
	writeFile(t, filepath.Join(home, ".netrc"), "machine x password y")
	writeFile(t, filepath.Join(home, "notes.txt"), "home notes")
	outside := mkdir(t, root, "outside")

	// allow_read_write grants what Unix permissions allow: under a root
	// runner the agent has its own uid, to which B must be writable.
	giveToAgent(t, b, filepath.Join(b, "existing.txt"), filepath.Join(b, "sub"))
	fa := landlock.FileAccess{
		AllowRead:      []string{a, home},
		AllowReadWrite: []string{b},
		Deny:           []string{secret},
		AllowNetwork:   true,
		HomeDir:        home,
	}
	h, ws := newHost(t, fa)

	if got := expectOK(t, h, "cat "+filepath.Join(a, "data.txt")); !strings.Contains(got, "read-me") {
		t.Errorf("reading A: %q", got)
	}
	expectDenied(t, h, "echo x > "+filepath.Join(a, "data.txt"))
	expectDenied(t, h, "echo x > "+filepath.Join(a, "new.txt"))
	expectOK(t, h, "echo written > "+filepath.Join(b, "existing.txt")+" && echo new > "+filepath.Join(b, "sub", "new.txt"))
	if raw, _ := os.ReadFile(filepath.Join(b, "existing.txt")); string(raw) != "written\n" {
		t.Errorf("B/existing.txt = %q after the agent wrote it", raw)
	}
	// Hidden by a mount (a root runner) or denied by Landlock: either
	// way it shows and takes nothing.
	expectFails(t, h, "cat "+filepath.Join(secret, "key"), "top-secret")
	expectFails(t, h, "echo x > "+filepath.Join(secret, "key"), "")
	expectFails(t, h, "echo x > "+filepath.Join(secret, "new"), "")
	if code, out := shell(t, h, "ls "+secret); strings.Contains(out, "key") {
		t.Errorf("ls of the denied directory: exit %d, output %q", code, out)
	}
	expectDenied(t, h, "cat /etc/shadow")
	expectDenied(t, h, "cat "+filepath.Join(other, "MEMORY.md"))
	expectDenied(t, h, "echo x > "+filepath.Join(outside, "x"))
	expectDenied(t, h, "echo x > /etc/meepa-test-should-not-exist")
	expectDenied(t, h, "cat "+filepath.Join(home, ".netrc"))
	if got := expectOK(t, h, "cat "+filepath.Join(home, "notes.txt")); !strings.Contains(got, "home notes") {
		t.Errorf("reading a home non-dotfile: %q", got)
	}
	// The workspace is HOME and the working directory, read-write.
	if got := expectOK(t, h, `echo hi > mine.txt && cat "$HOME/mine.txt" && pwd`); !strings.Contains(got, "hi") || !strings.Contains(got, ws) {
		t.Errorf("workspace: %q", got)
	}
	if got := expectOK(t, h, `echo t > "$TMPDIR/t" && cat "$TMPDIR/t"`); !strings.Contains(got, "t") {
		t.Errorf("tmpdir: %q", got)
	}
	for _, p := range []string{filepath.Join(b, "secret", "key"), filepath.Join(a, "data.txt")} {
		raw, _ := os.ReadFile(p)
		if strings.Contains(string(raw), "x") && !strings.Contains(string(raw), "read-me") {
			t.Errorf("%s was modified: %q", p, raw)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Errorf("the agent created a file outside its grants")
	}

	// With allow_home_dotfiles the same dotfile is readable.
	fa.AllowHomeDotfiles = true
	h2, _ := newHost(t, fa)
	if got := expectOK(t, h2, "cat "+filepath.Join(home, ".netrc")); !strings.Contains(got, "password") {
		t.Errorf("allow_home_dotfiles: %q", got)
	}
}

func TestHostNetwork(t *testing.T) {
	requireLandlock(t, landlock.MinNetABI)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello-from-test-server\n"))
			_ = c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	// Debian's busybox-static (scripts/ensure-docker.sh installs it).
	dial := fmt.Sprintf("busybox nc 127.0.0.1 %d </dev/null", port)

	h, _ := newHost(t, landlock.FileAccess{AllowNetwork: true})
	if got := expectOK(t, h, dial); !strings.Contains(got, "hello-from-test-server") {
		t.Errorf("allow_network = true: %q", got)
	}
	h, _ = newHost(t, landlock.FileAccess{AllowNetwork: false})
	code, out := shell(t, h, dial)
	if code == 0 || strings.Contains(out, "hello-from-test-server") {
		t.Errorf("allow_network = false: exit %d, output %q; want the connection refused by Landlock", code, out)
	}
	// Listening is TCP bind, denied too.
	code, out = shell(t, h, "busybox nc -l -p 0 -w 1 </dev/null")
	if code == 0 {
		t.Errorf("allow_network = false: listening worked: %q", out)
	}
}

func TestHostFailsClosedOnLowABI(t *testing.T) {
	requireLandlock(t, 1)
	t.Setenv(landlock.MaxABIEnv, "3")
	h, _ := newHost(t, landlock.FileAccess{AllowNetwork: false})
	req, _ := json.Marshal(agent.Request{
		Message: agent.Message{ID: "m1", Text: "!sh echo ran > ran.txt"},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
	})
	_, err := h.Run(context.Background(), Job{MessageID: "m1", Stdin: req, Timeout: time.Minute})
	if !errors.Is(err, landlock.ErrUnsupported) {
		t.Fatalf("Run = %v, want ErrUnsupported", err)
	}
	for _, want := range []string{"allow_network = false", "ABI 4", "ABI 3", "refusing to run the agent unrestricted"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(h.opts.Workspace, "ran.txt")); err == nil {
		t.Error("the agent ran although the kernel could not enforce its rules")
	}
	// File rules alone need ABI 3, which the override still offers.
	h2, _ := newHost(t, landlock.FileAccess{AllowNetwork: true})
	expectOK(t, h2, "true")
	t.Setenv(landlock.MaxABIEnv, "0")
	if _, err := h2.Run(context.Background(), Job{MessageID: "m2", Stdin: req, Timeout: time.Minute}); !errors.Is(err, landlock.ErrUnsupported) || !strings.Contains(err.Error(), "no Landlock") {
		t.Fatalf("Run with no Landlock = %v, want ErrUnsupported naming it", err)
	}
}

func runJob(t *testing.T, h *Host, text string, timeout time.Duration) (Outcome, agent.Reply) {
	t.Helper()
	req, _ := json.Marshal(agent.Request{
		Message: agent.Message{ID: "m", Text: text},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
	})
	out, err := h.Run(context.Background(), Job{MessageID: "m", Stdin: req, Timeout: timeout})
	if err != nil {
		t.Fatalf("run %q: %v", text, err)
	}
	var r agent.Reply
	_ = json.Unmarshal(out.Stdout, &r)
	return out, r
}

func TestHostTimeoutKillsTheGroup(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	h, ws := newHost(t, landlock.FileAccess{AllowNetwork: true})
	// Nothing leaves the session the backend finds the agent's processes by.
	// The background sleep writes its pid; the foreground one outlives the
	// timeout.
	out, _ := runJob(t, h, "!sh sleep 60 & echo $! > bg.pid; sleep 60", 2*time.Second)
	if !out.TimedOut {
		t.Fatalf("outcome %+v, want TimedOut", out)
	}
	raw, err := os.ReadFile(filepath.Join(ws, "bg.pid"))
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(raw), &pid); err != nil || pid <= 0 {
		t.Fatalf("bg.pid = %q", raw)
	}
	// Reaped or at least killed: a zombie has no cmdline left.
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && len(cmdline) > 0 {
		t.Errorf("background process %d (%q) survived the timeout", pid, cmdline)
	}
}

func TestHostMemoryAndPidsLimits(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	ws := mkdir(t, testutil.SharedTempDir(t), "workspace")
	newLimited := func(mem agentspec.Size, pids int64) *Host {
		h, err := NewHost(HostOptions{AgentID: "tf-acc-limits", Workspace: ws, FileAccess: landlock.FileAccess{AllowNetwork: true},
			RunnerBinary: testutil.RunnerBinary(t), MemoryLimit: mem, PidsLimit: pids})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// A 96 MiB shell variable: fine under 512m, refused under 128m (the
	// shell needs room for the string and its copies).
	const grow = `x=$(head -c 100663296 /dev/zero | tr '\0' a); echo len=${#x}`
	if code, out := shell(t, newLimited(agentspec.SizeOf(512<<20), 0), grow); code != 0 || !strings.Contains(out, "len=100663296") {
		t.Fatalf("512m: exit %d %q", code, out)
	}
	if code, out := shell(t, newLimited(agentspec.SizeOf(128<<20), 0), grow); code == 0 || strings.Contains(out, "len=100663296") {
		t.Errorf("128m: exit %d %q; want the allocation refused", code, out)
	}
	if _, err := NewHost(HostOptions{Workspace: ws, MemoryLimit: agentspec.SizeOf(64 << 20), RunnerBinary: testutil.RunnerBinary(t)}); err == nil || !strings.Contains(err.Error(), "below 128m") {
		t.Errorf("NewHost with 64m = %v, want the floor named", err)
	}
	// 40 background processes under a limit of 24 tasks (the agent loop
	// has a few threads of its own): some forks must fail.
	const fork = `i=0; while [ $i -lt 40 ]; do sleep 5 >/dev/null 2>&1 & i=$((i+1)); done; echo forked`
	limited := newLimited(agentspec.Size{}, 24)
	if limited.Health()["process_limit"] == "rlimit" && os.Geteuid() == 0 {
		t.Skip("root without a writable pids cgroup: RLIMIT_NPROC does not bind uid 0")
	}
	// Refused forks show in the shell's output, or, when the agent loop
	// itself needed a thread at the wrong moment, in its stderr: the Go
	// runtime's "failed to create new OS thread", or only the end of the
	// goroutine dump that follows it when the tail is past the message.
	out, r := runJob(t, limited, agent.OfflineShellPrefix+fork, time.Minute)
	threadless := bytes.Contains(out.StderrTail, []byte("failed to create new OS thread")) ||
		r.Reply == "" && bytes.Contains(out.StderrTail, []byte("runtime/proc.go"))
	if !strings.Contains(r.Reply, "fork") && !threadless {
		t.Errorf("pids 24: reply %q, stderr %q; want forks refused", r.Reply, out.StderrTail)
	}
	if code, out := shell(t, newLimited(agentspec.Size{}, 256), fork); code != 0 || !strings.Contains(out, "forked") {
		t.Errorf("pids 256: exit %d %q", code, out)
	}
}

func TestNewHostRefusesContradictoryRules(t *testing.T) {
	ws := mkdir(t, testutil.SharedTempDir(t), "workspace")
	_, err := NewHost(HostOptions{Workspace: ws, RunnerBinary: testutil.RunnerBinary(t),
		FileAccess: landlock.FileAccess{Deny: []string{filepath.Dir(ws)}}})
	if err == nil || !strings.Contains(err.Error(), "always read-write") {
		t.Errorf("NewHost with a deny over the workspace = %v", err)
	}
	_, err = NewHost(HostOptions{Workspace: ws, RunnerBinary: testutil.RunnerBinary(t),
		FileAccess: landlock.FileAccess{AllowRead: []string{"relative/path"}}})
	var fe *fault.FieldError
	if !errors.As(err, &fe) || fe.Field != "file_access.allow_read" {
		t.Errorf("NewHost with a relative path = %v, want a FieldError on allow_read", err)
	}
}

// In host mode the workspace is granted read-write: "/" or the directory of
// the Docker socket would grant the agent the host.
func TestNewHostRefusesHostWideWorkspace(t *testing.T) {
	for _, ws := range []string{"/", "/run", "/var/run", "/tmp/../run"} {
		_, err := NewHost(HostOptions{Workspace: ws, RunnerBinary: "/bin/true", FileAccess: landlock.FileAccess{Unrestricted: true}})
		if err == nil || !strings.Contains(err.Error(), "workspace") {
			t.Errorf("NewHost with workspace %q = %v, want a refusal", ws, err)
		}
	}
}

func TestCgroupPatternIsPerAgent(t *testing.T) {
	for name, want := range map[string]bool{
		"meepa-a-0123456789ab":   true,
		"meepa-a-b-0123456789ab": false,
		"meepa-a-0123456789":     false,
		"meepa-ab-0123456789ab":  false,
	} {
		if ok, err := filepath.Match(cgroupPattern("a"), name); err != nil || ok != want {
			t.Errorf("cgroupPattern(a) on %s = %v %v, want %v", name, ok, err, want)
		}
	}
}

// A protected file (the runner's config) stays unreadable even under an
// allow_read of its whole directory tree.
func TestHostProtectBeatsAllow(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	root := testutil.SharedTempDir(t)
	cfgDir := mkdir(t, root, "runners", "a1")
	cfg := filepath.Join(cfgDir, "config.json")
	writeFile(t, cfg, `{"token":"tok-secret"}`)
	writeFile(t, filepath.Join(root, "readable.txt"), "open")
	ws := mkdir(t, root, "agents", "a1")
	h, err := NewHost(HostOptions{
		AgentID:      testAgentID,
		Workspace:    ws,
		FileAccess:   landlock.FileAccess{AllowRead: []string{root}, AllowNetwork: true},
		RunnerBinary: testutil.RunnerBinary(t),
		Protect:      []string{cfg},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := expectOK(t, h, "cat "+filepath.Join(root, "readable.txt")); !strings.Contains(got, "open") {
		t.Errorf("allowed file: %q", got)
	}
	// Denied by Landlock, or covered by an empty file (a root runner):
	// the token never shows.
	if code, out := shell(t, h, "cat "+cfg); strings.Contains(out, "tok-secret") {
		t.Errorf("cat of the protected config: exit %d, output %q", code, out)
	}
}
