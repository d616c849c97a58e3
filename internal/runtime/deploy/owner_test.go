package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workspace owners and other users' reach need root")
	}
}

// writeAgent runs what Apply does to the filesystem for a (no daemon, no
// runner): the workspace and the runner's files.
func writeAgent(t *testing.T, s *Service, id string, container bool) (string, error) {
	t.Helper()
	a := agentspec.Agent{
		Config: agentspec.Config{AgentID: id, Container: agentspec.ContainerMode{Enabled: container, Image: "img:1"}},
		Meta:   agentspec.Meta{Soul: "the soul of " + id + "\n", Memory: "m\n"},
	}
	l := Listener{Unix: s.Layout(id).Socket}
	s.complete(&a, l)
	_, _, err := s.writeFiles(&a, l, false)
	return a.Config.Workspace, err
}

// as runs argv as uid:gid with exactly the supplementary groups given and
// says whether it succeeded.
func as(t *testing.T, uid, gid int, groups []uint32, argv ...string) (bool, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}}
	out, err := cmd.CombinedOutput()
	return err == nil, strings.TrimSpace(string(out))
}

func ownerUID(t *testing.T, p string) int {
	t.Helper()
	o, ok := ownerOf(p)
	if !ok {
		t.Fatalf("%s is missing", p)
	}
	return o.UID
}

// Two container-mode agents in one state directory get uids of their own,
// neither nobody's; and once a host-mode agent with a root runner has
// started there, neither nobody nor the other agent's uid can read or
// append to an agent's SOUL.md (the old release gave the workspace to
// nobody, and the host-mode runner made <state_dir> and agents/ o+x).
func TestContainerAgentsWorkspacesAreTheirOwn(t *testing.T) {
	requireRoot(t)
	state := filepath.Join(testutil.SharedTempDir(t), "state")
	s := NewService(Options{StateDir: state})
	wsA, err := writeAgent(t, s, "agent-a", true)
	if err != nil {
		t.Fatal(err)
	}
	wsB, err := writeAgent(t, s, "agent-b", true)
	if err != nil {
		t.Fatal(err)
	}
	uidA, uidB := ownerUID(t, wsA), ownerUID(t, wsB)
	if uidA == uidB || uidA == agentspec.DefaultUID || uidB == agentspec.DefaultUID {
		t.Fatalf("workspace owners %d and %d: want two uids of their own, neither nobody (%d)", uidA, uidB, agentspec.DefaultUID)
	}
	for _, p := range []string{filepath.Join(wsA, workspace.SoulFile), filepath.Join(wsA, workspace.SkillsDir)} {
		if got := ownerUID(t, p); got != uidA {
			t.Errorf("%s owned by %d, want the agent's %d", p, got, uidA)
		}
	}

	// A host-mode agent whose runner runs as root starts in the same
	// state directory.
	wsH, err := writeAgent(t, s, "agent-h", false)
	if err != nil {
		t.Fatal(err)
	}
	// NewHost is where a root runner gives its agent the way through.
	if _, err := sandbox.NewHost(sandbox.HostOptions{AgentID: "agent-h", Workspace: wsH, StateDir: state, MemoryLimit: agentspec.SizeOf(512 << 20)}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{state, filepath.Join(state, "agents"), filepath.Join(state, "runners")} {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s is mode %#o: open to others", d, st.Mode().Perm())
		}
	}

	soul := filepath.Join(wsA, workspace.SoulFile)
	for _, who := range []struct {
		name     string
		uid, gid int
	}{{"nobody", agentspec.DefaultUID, agentspec.DefaultGID}, {"agent-b's uid", uidB, uidB}} {
		if ok, out := as(t, who.uid, who.gid, []uint32{}, "/bin/cat", soul); ok {
			t.Errorf("%s read agent-a's SOUL.md: %q", who.name, out)
		}
		if ok, out := as(t, who.uid, who.gid, []uint32{}, "/bin/sh", "-c", "echo pwned >> "+soul); ok {
			t.Errorf("%s appended to agent-a's SOUL.md: %q", who.name, out)
		}
	}
	if raw, err := os.ReadFile(soul); err != nil || string(raw) != "the soul of agent-a\n" {
		t.Errorf("agent-a's SOUL.md is %q, %v", raw, err)
	}

	// The host-mode agent still reaches its own workspace: by the group
	// the state directories give search to, which its process has.
	agentsDir, err := os.Stat(filepath.Join(state, "agents"))
	if err != nil {
		t.Fatal(err)
	}
	gid := agentsDir.Sys().(*syscall.Stat_t).Gid
	uidH := agentspec.AgentUID("agent-h")
	if ok, out := as(t, uidH, uidH, []uint32{gid}, "/bin/cat", filepath.Join(wsH, workspace.SoulFile)); !ok {
		t.Errorf("the host-mode agent cannot read its own SOUL.md: %s", out)
	}
	// And the agents' group reaches no other agent's workspace.
	if ok, out := as(t, uidH, uidH, []uint32{gid}, "/bin/cat", soul); ok {
		t.Errorf("the host-mode agent read agent-a's SOUL.md: %q", out)
	}
}

// A workspace the old release left to nobody, in a state directory left
// o+x, is taken over on apply: every file the agent had becomes its own
// uid's, and nobody reaches none of it.
func TestWorkspaceLeftToNobodyIsTakenOver(t *testing.T) {
	requireRoot(t)
	state := filepath.Join(testutil.SharedTempDir(t), "state")
	ws := workspace.Path(state, "old")
	files := map[string]string{workspace.SoulFile: "soul\n", workspace.MemoryFile: "m\n", "memory.db": "db", "notes/a.txt": "a"}
	for name, body := range files {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, workspace.SkillsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	// As the old release left it: everything nobody's, the state
	// directory and agents/ passable by others.
	if err := sandbox.ChownTree(ws, agentspec.DefaultUID, agentspec.DefaultGID); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{state, filepath.Join(state, "agents")} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := as(t, agentspec.DefaultUID, agentspec.DefaultGID, []uint32{}, "/bin/cat", filepath.Join(ws, workspace.SoulFile)); !ok {
		t.Fatal("setup: nobody cannot read the old workspace, so the test shows nothing")
	}

	s := NewService(Options{StateDir: state})
	if _, err := writeAgent(t, s, "old", true); err != nil {
		t.Fatal(err)
	}
	want := agentspec.AgentUID("old")
	for name := range files {
		if got := ownerUID(t, filepath.Join(ws, name)); got != want {
			t.Errorf("%s owned by %d after apply, want the agent's %d", name, got, want)
		}
	}
	for _, p := range []string{ws, filepath.Join(ws, "notes"), filepath.Join(ws, workspace.SkillsDir)} {
		if got := ownerUID(t, p); got != want {
			t.Errorf("%s owned by %d after apply, want the agent's %d", p, got, want)
		}
	}
	if ok, out := as(t, agentspec.DefaultUID, agentspec.DefaultGID, []uint32{}, "/bin/cat", filepath.Join(ws, workspace.SoulFile)); ok {
		t.Errorf("nobody still reads the workspace after apply: %q", out)
	}
}

// A derived uid that another agent's workspace in the state directory
// already has (two ids whose hashes meet) is refused, naming the setting.
func TestDerivedUserCollisionIsRefused(t *testing.T) {
	requireRoot(t)
	state := t.TempDir()
	other := workspace.Path(state, "other")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	u := agentspec.AgentUser("mine")
	if err := os.Chown(other, u.UID, u.GID); err != nil {
		t.Fatal(err)
	}
	s := NewService(Options{StateDir: state})
	_, err := writeAgent(t, s, "mine", true)
	var se *fault.StepError
	if !errors.As(err, &se) || se.Field != "container_mode.user" || !strings.Contains(err.Error(), "agent other's workspace") {
		t.Fatalf("err = %v, want a container_mode.user error naming agent other", err)
	}
	// Named explicitly, the user is the owner's choice.
	a := agentspec.Agent{Config: agentspec.Config{AgentID: "mine", Container: agentspec.ContainerMode{Enabled: true, User: userSpec(t, "3000:3000")}}}
	if err := s.CheckAgentUser(a.Config); err != nil {
		t.Errorf("explicit user refused: %v", err)
	}
}

// userSpec is s parsed as container_mode.user.
func userSpec(t *testing.T, s string) agentspec.UserSpec {
	t.Helper()
	u, err := agentspec.ParseUserSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
