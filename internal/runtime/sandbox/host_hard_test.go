package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Issue 11, host mode against a hostile agent: each test runs the real
// agent-runner child under the real kernel (Landlock, seccomp, mount
// namespaces). The ones about the dedicated uid and hidden paths need the
// runner to be root, as the production runner is.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the dedicated agent uid and hidden denied paths need a root runner")
	}
}

// Landlock does not govern chmod/chown: the agent's own uid does. A
// runner config that no rule grants (so nothing hides it) keeps its mode.
func TestHostAgentCannotChmodRunnerFiles(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	requireRoot(t)
	root := testutil.SharedTempDir(t)
	cfgDir := mkdir(t, root, "runners", "a1")
	cfg := filepath.Join(cfgDir, "config.json")
	writeFile(t, cfg, `{"token":"tok-secret"}`)
	if err := os.Chmod(cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	h, exe := probeHost(t, true)
	if h.user == nil || h.user.UID != agentspec.AgentUID(testAgentID) {
		t.Fatalf("agent uid %+v, want the dedicated %d", h.user, agentspec.AgentUID(testAgentID))
	}
	for _, p := range []string{cfg, cfgDir} {
		if code, out := shell(t, h, exe+" meepa-probe chmod "+p); code != 13 {
			t.Errorf("chmod %s from the sandbox: exit %d, want 13 (EPERM); output: %s", p, code, out)
		}
	}
	if st, _ := os.Stat(cfg); st.Mode().Perm() != 0o600 {
		t.Errorf("runner config mode %v after the agent's chmod, want 0600", st.Mode().Perm())
	}
	if st, _ := os.Stat(cfgDir); st.Mode().Perm() != 0o755 {
		t.Errorf("runner dir mode %v after the agent's chmod, want 0755", st.Mode().Perm())
	}
	// The agent runs as its uid and owns its workspace.
	if got := expectOK(t, h, "id -u && stat -c %u ."); !strings.Contains(got, fmt.Sprint(agentspec.AgentUID(testAgentID))) {
		t.Errorf("id/stat in the sandbox: %q", got)
	}
	if st, err := os.Stat(h.opts.Workspace); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(agentspec.AgentUID(testAgentID)) || st.Mode().Perm() != 0o700 {
		t.Errorf("workspace %v %v: want owned by the agent uid, 0700", st.Mode(), err)
	}
}

func TestHostSeccompHardening(t *testing.T) {
	requireLandlock(t, landlock.MinNetABI)
	h, exe := probeHost(t, true)
	hNoNet, _ := probeHost(t, false)
	for _, p := range []struct {
		h         *Host
		what, arg string
		want      int
	}{
		// Sockets: TCP and stream pairs only.
		{h, "sctp", "x", 13},
		{hNoNet, "sctp", "x", 13},
		{h, "smc", "x", 13},
		{hNoNet, "smc", "x", 13},
		{hNoNet, "tcp-socket", "x", 13},
		{h, "tcp-socket", "x", 0},
		{h, "socketpair", "dgram", 13},
		{h, "socketpair", "seqpacket", 13},
		{h, "socketpair", "stream", 0},
		// The agent loop ($PPID of the tool's shell) holds the API key:
		// no tracing, no reading its memory, not even by path.
		{h, "ptrace", "$PPID", 13},
		{h, "vmread", "$PPID", 13},
		{h, "procmem", "$PPID", 13},
		{h, "userns", "x", 13},
		{h, "keyctl", "x", 13},
		{h, "bpf", "x", 13},
		{h, "userfaultfd", "x", 13},
	} {
		code, out := shell(t, p.h, fmt.Sprintf("%s meepa-probe %s %s", exe, p.what, p.arg))
		if code != p.want {
			t.Errorf("%s %s (allow_network = %v): exit %d, want %d; output: %s", p.what, p.arg, p.h.opts.FileAccess.AllowNetwork, code, p.want, out)
		}
	}
	// The agent loop is not dumpable: its /proc entries are root's.
	if got := expectOK(t, h, "stat -c %u /proc/$PPID/environ"); strings.TrimSpace(got) != "0" {
		t.Errorf("owner of the agent loop's /proc/PID/environ: %q, want 0 (not dumpable)", got)
	}
}

// An agent whose grant covers its workspace's parent replaces the
// workspace by a link to "/": the next message is refused, nothing runs.
func TestHostWorkspaceSymlinkRefused(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	root := testutil.SharedTempDir(t)
	agents := mkdir(t, root, "agents")
	if err := os.Chmod(agents, 0o777); err != nil {
		t.Fatal(err)
	}
	ws := mkdir(t, agents, "a1")
	h, err := NewHost(HostOptions{
		AgentID:      testAgentID,
		Workspace:    ws,
		FileAccess:   landlock.FileAccess{AllowReadWrite: []string{agents}, AllowNetwork: true},
		RunnerBinary: testutil.RunnerBinary(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	expectOK(t, h, fmt.Sprintf("mv %[1]s %[1]s.real && ln -s / %[1]s", ws))
	if fi, err := os.Lstat(ws); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the agent did not swap its workspace: %v %v", fi, err)
	}
	req, _ := json.Marshal(agent.Request{Message: agent.Message{ID: "m2", Text: "!sh touch /etc/meepa-pwned"}, LLM: agentspec.LLMConfig{Provider: agentspec.ProviderOffline}})
	_, err = h.Run(context.Background(), Job{MessageID: "m2", Stdin: req, Timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("message after the swap: %v, want a refusal naming the symbolic link", err)
	}
	if _, err := os.Stat("/etc/meepa-pwned"); err == nil {
		if err := os.Remove("/etc/meepa-pwned"); err != nil {
			t.Error(err)
		}
		t.Error("the agent wrote /etc through its swapped workspace")
	}
	// A runner that starts on such a workspace refuses too.
	if _, err := NewHost(HostOptions{AgentID: testAgentID, Workspace: ws, RunnerBinary: testutil.RunnerBinary(t),
		FileAccess: landlock.FileAccess{AllowNetwork: true}}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("NewHost on a linked workspace: %v", err)
	}
}

// The workspace chown follows no link and stays on the workspace's
// filesystem.
func TestChownTreeNoLinksNoMounts(t *testing.T) {
	requireRoot(t)
	root := testutil.SharedTempDir(t)
	outside := filepath.Join(root, "outside.txt")
	writeFile(t, outside, "host file")
	outDir := mkdir(t, root, "outside-dir")
	ws := mkdir(t, root, "ws")
	mkdir(t, ws, "sub")
	writeFile(t, filepath.Join(ws, "sub", "f"), "x")
	for link, target := range map[string]string{"l-file": outside, "sub/l-dir": outDir} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	mnt := mkdir(t, ws, "mnt")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	}()
	writeFile(t, filepath.Join(mnt, "other-fs"), "x")

	if err := ChownTree(ws, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) uint32 {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	for _, p := range []string{ws, filepath.Join(ws, "sub"), filepath.Join(ws, "sub", "f"), filepath.Join(ws, "l-file"), filepath.Join(ws, "sub", "l-dir")} {
		if got := owner(p); got != 4242 {
			t.Errorf("%s: owner %d, want 4242", p, got)
		}
	}
	for _, p := range []string{outside, outDir, mnt, filepath.Join(mnt, "other-fs")} {
		if got := owner(p); got != 0 {
			t.Errorf("%s: owner %d, want 0 (not reached through a link or a mount)", p, got)
		}
	}
	// A workspace reached through a link is refused.
	link := filepath.Join(root, "ws-link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	if err := ChownTree(link, 4242, 4243); err == nil {
		t.Error("ChownTree through a link worked")
	}
}

// allow_read_write = [D], deny = [D/secret, D/token]: D is fully
// read-write (create and list directly in it) and the denied paths show
// nothing. Other agents' workspaces and the runners' files stay hidden
// under an allow of the whole state directory.
func TestHostDenyInsideAllowIsExact(t *testing.T) {
	requireLandlock(t, landlock.MinFSABI)
	requireRoot(t)
	root := testutil.SharedTempDir(t)
	d := mkdir(t, root, "d")
	secret := mkdir(t, d, "secret")
	writeFile(t, filepath.Join(secret, "key"), "top-secret")
	token := filepath.Join(d, "token")
	writeFile(t, token, "tok-secret")
	writeFile(t, filepath.Join(d, "existing.txt"), "d-data")
	giveToAgent(t, d, filepath.Join(d, "existing.txt"))
	state := mkdir(t, root, "state")
	other := mkdir(t, state, "agents", "other")
	writeFile(t, filepath.Join(other, "MEMORY.md"), "other memory")
	cfg := filepath.Join(mkdir(t, state, "runners", "a1"), "config.json")
	writeFile(t, cfg, `{"token":"runner-token"}`)
	ws := mkdir(t, state, "agents", "a1")
	// The provider's layout is 0700; the runner lets the agent's uid pass.
	for _, p := range []string{state, filepath.Join(state, "agents")} {
		if err := os.Chmod(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	h, err := NewHost(HostOptions{
		AgentID:   testAgentID,
		Workspace: ws,
		FileAccess: landlock.FileAccess{AllowReadWrite: []string{d}, AllowRead: []string{state},
			Deny: []string{secret, token}, AllowNetwork: true},
		RunnerBinary: testutil.RunnerBinary(t),
		StateDir:     state,
		Protect:      []string{cfg},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := expectOK(t, h, fmt.Sprintf("echo new > %[1]s/new.txt && mkdir %[1]s/newdir && ls %[1]s && cat %[1]s/existing.txt", d))
	for _, want := range []string{"new.txt", "newdir", "existing.txt", "d-data"} {
		if !strings.Contains(got, want) {
			t.Errorf("create and list in D: output %q lacks %q", got, want)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(d, "new.txt")); string(raw) != "new\n" {
		t.Errorf("D/new.txt on the host: %q", raw)
	}
	if got := expectOK(t, h, "ls -A "+secret+"; cat "+token+"; echo end"); strings.Contains(got, "key") || strings.Contains(got, "tok-secret") || !strings.Contains(got, "end") {
		t.Errorf("hidden paths show something: %q", got)
	}
	for _, cmd := range []string{"cat " + filepath.Join(secret, "key"), "echo x > " + filepath.Join(secret, "new"), "echo x > " + token,
		"rm -rf " + secret, "mv " + secret + " " + d + "/moved", "cat " + filepath.Join(other, "MEMORY.md"), "cat " + cfg} {
		code, out := shell(t, h, cmd)
		if code == 0 || strings.Contains(out, "top-secret") || strings.Contains(out, "tok-secret") ||
			strings.Contains(out, "other memory") || strings.Contains(out, "runner-token") {
			t.Errorf("%q: exit %d, output %q; want a failure showing nothing", cmd, code, out)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(secret, "key")); string(raw) != "top-secret" {
		t.Errorf("D/secret/key on the host: %q", raw)
	}
	if raw, _ := os.ReadFile(token); string(raw) != "tok-secret" {
		t.Errorf("D/token on the host: %q", raw)
	}
	// The mounts lived in the child's namespace only.
	if raw, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(raw), secret) {
		t.Errorf("a hiding mount leaked into the runner's namespace")
	}
	// Ruleset: D granted whole, the denied paths hidden.
	rs, err := h.Ruleset(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var hidden []string
	for _, x := range rs.Hide {
		hidden = append(hidden, x.Path)
	}
	if !strings.Contains(strings.Join(hidden, " "), secret) || !strings.Contains(strings.Join(hidden, " "), token) || !strings.Contains(strings.Join(hidden, " "), other) {
		t.Errorf("hidden %v, want %s, %s and %s", hidden, secret, token, other)
	}
}
