package workspace

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "agent-1": true, "my_agent": true, "0abc": true,
		"": false, "../x": false, "A B": false, "Agent": false, "-x": false, "_x": false, "a/b": false, "a.b": false,
		string(make([]byte, 100)): false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
	long := ""
	for i := 0; i < 63; i++ {
		long += "a"
	}
	if !ValidID(long) || ValidID(long+"a") {
		t.Errorf("63 characters must be valid and 64 not")
	}
}

func TestEnsureCreatesAndKeepsAgentEdits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agents", "a1")
	r, err := Ensure(Spec{Dir: dir, Soul: "soul v1", Memory: "mem v1"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || !r.SoulWritten {
		t.Fatalf("first Ensure: %+v", r)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o700, filepath.Dir(dir): 0o700, filepath.Join(dir, "skills"): 0o700,
		filepath.Join(dir, SoulFile): 0o600, filepath.Join(dir, MemoryFile): 0o600} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %o, want %o", p, st.Mode().Perm(), mode)
		}
	}
	mustRead(t, filepath.Join(dir, SoulFile), "soul v1")
	mustRead(t, filepath.Join(dir, MemoryFile), "mem v1")

	// The agent edits; a new soul in config must not overwrite it.
	testutil.Must(t, os.WriteFile(filepath.Join(dir, SoulFile), []byte("agent edit"), 0o600))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, MemoryFile), []byte("agent memory"), 0o600))
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600))
	r, err = Ensure(Spec{Dir: dir, Soul: "soul v2", Memory: "mem v2"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Created || r.SoulWritten {
		t.Fatalf("second Ensure: %+v", r)
	}
	mustRead(t, filepath.Join(dir, SoulFile), "agent edit")
	mustRead(t, filepath.Join(dir, MemoryFile), "agent memory")
	mustRead(t, filepath.Join(dir, "notes.txt"), "x")

	// manage_soul rewrites SOUL.md only, and reports it.
	r, err = Ensure(Spec{Dir: dir, Soul: "soul v2", Memory: "mem v2", ManageSoul: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.SoulWritten {
		t.Fatal("manage_soul did not rewrite SOUL.md")
	}
	mustRead(t, filepath.Join(dir, SoulFile), "soul v2")
	mustRead(t, filepath.Join(dir, MemoryFile), "agent memory")
	if r, _ := Ensure(Spec{Dir: dir, Soul: "soul v2", ManageSoul: true}); r.SoulWritten {
		t.Fatal("an equal SOUL.md was rewritten")
	}

	st, err := Inspect(dir)
	if err != nil || !st.Exists || st.Soul != "soul v2" || st.Mode != 0o700 {
		t.Fatalf("Inspect: %+v %v", st, err)
	}
}

func TestEnsureRefusesSymlink(t *testing.T) {
	base := t.TempDir()
	testutil.Must(t, os.MkdirAll(filepath.Join(base, "agents"), 0o700))
	testutil.Must(t, os.Symlink("/etc", filepath.Join(base, "agents", "a1")))
	if _, err := Ensure(Spec{Dir: filepath.Join(base, "agents", "a1")}); err == nil {
		t.Fatal("a symlinked workspace was accepted")
	}
}

func TestEnsureRestoresMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agents", "a1")
	if _, err := Ensure(Spec{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	testutil.Must(t, os.Chmod(dir, 0o755))
	if _, err := Ensure(Spec{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("mode %o", st.Mode().Perm())
	}
}

func TestInspectMissing(t *testing.T) {
	st, err := Inspect(filepath.Join(t.TempDir(), "nope"))
	if err != nil || st.Exists {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestRemove(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "agents", "a1")
	if _, err := Ensure(Spec{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{base, filepath.Join(base, "agents"), "/", "relative/agents/a1", filepath.Join(base, "x", "a1")} {
		if err := Remove(bad); err == nil {
			t.Errorf("Remove(%q) was allowed", bad)
		}
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatal("workspace still there")
	}
	if err := Remove(dir); err != nil {
		t.Fatalf("removing a missing workspace: %v", err)
	}
}

func TestEnsureChownsWhatItMakes(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := filepath.Join(t.TempDir(), "agents", "a1")
	if _, err := Ensure(Spec{Dir: dir, Owner: &Owner{UID: 65534, GID: 65534}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, SoulFile), filepath.Join(dir, MemoryFile), filepath.Join(dir, SkillsDir)} {
		st, _ := os.Stat(p)
		if o, _ := statOwner(st); o != (Owner{65534, 65534}) {
			t.Errorf("%s owned by %v", p, o)
		}
	}
	// An agent file keeps its owner.
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "mine"), nil, 0o600))
	if _, err := Ensure(Spec{Dir: dir, Owner: &Owner{UID: 65534, GID: 65534}}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, "mine"))
	if o, _ := statOwner(st); o.UID != 0 {
		t.Errorf("agent file re-owned to %v", o)
	}
}

func mustRead(t *testing.T, p, want string) {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != want {
		t.Errorf("%s = %q, want %q", filepath.Base(p), raw, want)
	}
}

// The agent owns its workspace: a SOUL.md it turned into a symlink to a host
// file (the runner's config with the API key, say) must neither be read into
// Inspect's result, which lands in Terraform state, nor be written through.
func TestSoulSymlinkIsNeitherReadNorFollowed(t *testing.T) {
	base := t.TempDir()
	secret := filepath.Join(base, "config.json")
	if err := os.WriteFile(secret, []byte("api_key=sk-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "agents", "a1")
	if _, err := Ensure(Spec{Dir: dir, Soul: "soul v1"}); err != nil {
		t.Fatal(err)
	}
	soul := filepath.Join(dir, SoulFile)
	if err := os.Remove(soul); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, soul); err != nil {
		t.Fatal(err)
	}
	st, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.SoulPresent || st.Soul != "" {
		t.Fatalf("Inspect read through the SOUL.md symlink: %+v", st)
	}
	r, err := Ensure(Spec{Dir: dir, Soul: "soul v2", ManageSoul: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.SoulWritten {
		t.Fatal("a symlinked SOUL.md was not replaced under manage_soul")
	}
	mustRead(t, secret, "api_key=sk-secret")
	if fi, err := os.Lstat(soul); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("SOUL.md after Ensure: %v %v, want a regular file", fi, err)
	}
	mustRead(t, soul, "soul v2")
	left, _ := filepath.Glob(filepath.Join(dir, "*meepa-tmp*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A FIFO named SOUL.md would block a plain read for ever.
func TestSoulFIFOReadsAsAbsent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agents", "a1")
	if _, err := Ensure(Spec{Dir: dir, Soul: "s"}); err != nil {
		t.Fatal(err)
	}
	soul := filepath.Join(dir, SoulFile)
	testutil.Must(t, os.Remove(soul))
	if err := syscall.Mkfifo(soul, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Inspect(dir)
	if err != nil || st.SoulPresent {
		t.Fatalf("Inspect of a FIFO SOUL.md: %+v %v", st, err)
	}
}

// A mounted workspace (a message pod's /workspace) gets the same files as
// any other, but keeps the mode its volume gave it, and must exist.
func TestEnsureMountedKeepsModeAndNeedsTheDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "workspace")
	if _, err := Ensure(Spec{Dir: dir, Soul: "s", Mounted: true}); err == nil {
		t.Fatal("a missing mount point was made")
	}
	if _, err := os.Lstat(dir); err == nil {
		t.Fatal("Ensure made the mount point")
	}
	testutil.Must(t, os.Mkdir(dir, 0o700))
	// As the kubelet leaves a volume for a pod's fsGroup.
	testutil.Must(t, os.Chmod(dir, 0o770|os.ModeSetgid))
	r, err := Ensure(Spec{Dir: dir, Soul: "soul v1", Memory: "mem v1", Mounted: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Created || !r.SoulWritten {
		t.Fatalf("first Ensure: %+v", r)
	}
	if st, _ := os.Stat(dir); st.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
		t.Errorf("mount point mode %v, want it left at setgid 0770", st.Mode())
	}
	mustRead(t, filepath.Join(dir, SoulFile), "soul v1")
	mustRead(t, filepath.Join(dir, MemoryFile), "mem v1")
	if st, err := os.Stat(filepath.Join(dir, SkillsDir)); err != nil || !st.IsDir() {
		t.Fatalf("skills: %v", err)
	}
	testutil.Must(t, os.WriteFile(filepath.Join(dir, SoulFile), []byte("agent edit"), 0o600))
	if r, err := Ensure(Spec{Dir: dir, Soul: "soul v2", Mounted: true}); err != nil || r.SoulWritten {
		t.Fatalf("unmanaged soul: %+v %v", r, err)
	}
	mustRead(t, filepath.Join(dir, SoulFile), "agent edit")
	if r, err := Ensure(Spec{Dir: dir, Soul: "soul v2", ManageSoul: true, Mounted: true}); err != nil || !r.SoulWritten {
		t.Fatalf("managed soul: %+v %v", r, err)
	}
	mustRead(t, filepath.Join(dir, SoulFile), "soul v2")
	mustRead(t, filepath.Join(dir, MemoryFile), "mem v1")

	file := filepath.Join(t.TempDir(), "file")
	testutil.Must(t, os.WriteFile(file, nil, 0o600))
	if _, err := Ensure(Spec{Dir: file, Mounted: true}); err == nil {
		t.Fatal("a file was taken for a mounted workspace")
	}
}
