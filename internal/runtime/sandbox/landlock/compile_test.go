package landlock

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tree makes the filesystem the compiler tables run against, under root:
//
//	a/x.txt  a/sub/y.txt
//	b/file.txt  b/.hidden  b/other/z  b/secret/key  b/alias -> secret
//	home/.ssh/id  home/.bashrc  home/docs/d.txt
//	link -> a   blink -> b/secret
//	ws/to-a -> ../a   b/other/to-secret -> ../secret
//	ws/  tmp/  bin/agent-runner
func tree(t *testing.T) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a/sub", "b/other", "b/secret", "home/.ssh", "home/docs", "ws", "tmp", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/x.txt", "a/sub/y.txt", "b/file.txt", "b/.hidden", "b/other/z", "b/secret/key",
		"home/.ssh/id", "home/.bashrc", "home/docs/d.txt", "bin/agent-runner"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"link": "a", "blink": "b/secret", "b/alias": "secret",
		"ws/to-a": "../a", "b/other/to-secret": "../secret"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// base are the rules every case has: workspace, tmpdir, runner binary.
var base = []string{"bin/agent-runner ro file", "tmp rw", "ws rw"}

func TestCompile(t *testing.T) {
	root := tree(t)
	R := func(p string) string { return root + "/" + p }
	for _, tc := range []struct {
		name string
		fa   FileAccess
		home string
		// want are the rules besides base, as "path access [file]" with
		// paths relative to root.
		want    []string
		wantErr string
		// wantNote is a substring of one of the notes.
		wantNote string
		// covered are base rules that a wider rule makes redundant.
		covered []string
	}{
		{
			name: "nothing allowed",
			want: nil,
		},
		{
			name: "nested allows: read-write inside read",
			fa:   FileAccess{AllowRead: []string{R("a")}, AllowReadWrite: []string{R("a/sub")}},
			want: []string{"a ro", "a/sub rw"},
		},
		{
			name: "nested allows: read inside read-write is covered (read-write beats read)",
			fa:   FileAccess{AllowReadWrite: []string{R("a")}, AllowRead: []string{R("a/sub")}},
			want: []string{"a rw"},
		},
		{
			name:     "deny at the root of an allow drops it",
			fa:       FileAccess{AllowReadWrite: []string{R("b")}, Deny: []string{R("b")}},
			want:     nil,
			wantNote: "dropped: deny",
		},
		{
			name:     "deny above an allow drops it",
			fa:       FileAccess{AllowRead: []string{R("b/other")}, Deny: []string{R("b")}},
			want:     nil,
			wantNote: "dropped: deny",
		},
		{
			name: "denied directory inside an allow: siblings granted, symlinks not, the parent not",
			fa:   FileAccess{AllowReadWrite: []string{R("b")}, Deny: []string{R("b/secret")}},
			want: []string{"b/.hidden rw file", "b/file.txt rw file", "b/other rw"},
			// b/alias -> secret is skipped: a rule on it would grant secret.
			wantNote: "holds a denied path",
		},
		{
			name: "denied file, two levels down",
			fa:   FileAccess{AllowRead: []string{R("a")}, Deny: []string{R("a/sub/y.txt")}},
			want: []string{"a/x.txt ro file"},
		},
		{
			name: "deny outside any allow changes nothing",
			fa:   FileAccess{AllowRead: []string{R("a")}, Deny: []string{R("b")}},
			want: []string{"a ro"},
		},
		{
			name: "deny of a path that does not exist yet still expands its parent",
			fa:   FileAccess{AllowReadWrite: []string{R("b")}, Deny: []string{R("b/not-yet")}},
			want: []string{"b/.hidden rw file", "b/file.txt rw file", "b/other rw", "b/secret rw"},
		},
		{
			name: "symlinked allow is resolved",
			fa:   FileAccess{AllowRead: []string{R("link")}},
			want: []string{"a ro"},
		},
		{
			name: "symlinked deny is resolved",
			fa:   FileAccess{AllowReadWrite: []string{R("b")}, Deny: []string{R("blink")}},
			want: []string{"b/.hidden rw file", "b/file.txt rw file", "b/other rw"},
		},
		{
			name: "symlinked path component in a deny",
			fa:   FileAccess{AllowRead: []string{R("a")}, Deny: []string{R("link/sub")}},
			want: []string{"a/x.txt ro file"},
		},
		{
			name: "dot-dot and dot are cleaned",
			fa: FileAccess{
				AllowRead:      []string{R("a/sub/..")},
				AllowReadWrite: []string{R("b/./other/../")},
				Deny:           []string{R("b/other/../secret")},
			},
			want: []string{"a ro", "b/.hidden rw file", "b/file.txt rw file", "b/other rw"},
		},
		{
			name: "trailing slashes are cleaned",
			fa:   FileAccess{AllowRead: []string{R("a/")}, Deny: []string{R("a/sub/")}},
			want: []string{"a/x.txt ro file"},
		},
		{
			name: "home dotfiles denied by default",
			fa:   FileAccess{AllowRead: []string{R("home")}},
			home: R("home"),
			want: []string{"home/docs ro"},
		},
		{
			name: "home dotfiles allowed",
			fa:   FileAccess{AllowRead: []string{R("home")}, AllowHomeDotfiles: true},
			home: R("home"),
			want: []string{"home ro"},
		},
		{
			name: "an allow above home expands down to it",
			fa:   FileAccess{AllowRead: []string{root}},
			home: R("home"),
			// root's entries, with home expanded (no dotfiles) and the
			// symlinks skipped; ws and tmp are rw by their own rules.
			want:    []string{"a ro", "b ro", "bin ro", "home/docs ro"},
			covered: []string{"bin/agent-runner ro file"},
		},
		{
			name:     "an allowed home dotfile is still denied",
			fa:       FileAccess{AllowRead: []string{R("home/.ssh")}},
			home:     R("home"),
			want:     nil,
			wantNote: "home dotfile",
		},
		{
			name:     "an allow beneath a home dotfile is denied too",
			fa:       FileAccess{AllowReadWrite: []string{R("home/.ssh/id")}, AllowRead: []string{R("home/docs")}},
			home:     R("home"),
			want:     []string{"home/docs ro"},
			wantNote: "home dotfile",
		},
		{
			name:     "a missing allow grants nothing",
			fa:       FileAccess{AllowRead: []string{R("missing")}},
			want:     nil,
			wantNote: "does not exist",
		},
		{
			name:     "an allow through a symlink the agent can change (in its workspace) is dropped",
			fa:       FileAccess{AllowRead: []string{R("ws/to-a")}},
			want:     nil,
			wantNote: "which the agent can change",
		},
		{
			name:     "an allow through a symlink in an allow_read_write tree is dropped",
			fa:       FileAccess{AllowReadWrite: []string{R("b/other")}, AllowRead: []string{R("b/other/to-secret")}},
			want:     []string{"b/other rw"},
			wantNote: "which the agent can change",
		},
		{
			name: "a deny through a symlink in a read-write tree freezes the link's directory too",
			fa:   FileAccess{AllowReadWrite: []string{R("b")}, Deny: []string{R("b/other/to-secret")}},
			// b/other is expanded for the link (its parent loses write
			// rights, so the link cannot be repointed), b for the target.
			want: []string{"b/.hidden rw file", "b/file.txt rw file", "b/other/z rw file"},
		},
		{
			name:    "deny covering the workspace is refused",
			fa:      FileAccess{Deny: []string{root}},
			wantErr: "always read-write",
		},
		{
			name:    "deny covering the runner binary is refused",
			fa:      FileAccess{Deny: []string{R("bin")}},
			wantErr: "runner binary",
		},
		{
			name:    "relative path is refused",
			fa:      FileAccess{AllowRead: []string{"a"}},
			wantErr: "absolute",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Compile(Spec{
				FileAccess:   tc.fa,
				Workspace:    R("ws"),
				TmpDir:       R("tmp"),
				RunnerBinary: R("bin/agent-runner"),
				Home:         tc.home,
				System:       []SystemPath{},
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Compile error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs.Rules {
				s := strings.TrimPrefix(r.Path, root+"/") + " " + r.Access.String()
				if r.File {
					s += " file"
				}
				got = append(got, s)
			}
			want := slices.DeleteFunc(slices.Clone(base), func(s string) bool { return slices.Contains(tc.covered, s) })
			want = append(want, tc.want...)
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("rules\n got %q\nwant %q\nnotes: %q", got, want, rs.Notes)
			}
			for _, r := range rs.Rules {
				for _, d := range tc.fa.Deny {
					dd, _ := resolveMaybeMissing(d)
					if within(r.Path, dd) || within(dd, r.Path) && !r.File {
						t.Errorf("rule %s grants denied %s", r.Path, dd)
					}
				}
			}
			if tc.wantNote != "" && !slices.ContainsFunc(rs.Notes, func(n string) bool { return strings.Contains(n, tc.wantNote) }) {
				t.Errorf("notes %q lack %q", rs.Notes, tc.wantNote)
			}
		})
	}
}

func TestCompileSystemAndNetwork(t *testing.T) {
	root := tree(t)
	rs, err := Compile(Spec{
		FileAccess:   FileAccess{AllowNetwork: false, Deny: []string{"/usr/share/doc"}},
		Workspace:    root + "/ws",
		RunnerBinary: root + "/bin/agent-runner",
		System: []SystemPath{
			{Path: "/usr", Access: Read},
			{Path: "/no/such/system/path", Access: Read},
			{Path: "/proc/self", Access: Read, Literal: true},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rs.DenyTCP || rs.RequiredABI() != MinNetABI {
		t.Errorf("allow_network=false: DenyTCP=%v RequiredABI=%d", rs.DenyTCP, rs.RequiredABI())
	}
	var paths []string
	for _, r := range rs.Rules {
		paths = append(paths, r.Path)
		if r.Path == "/usr" || within(r.Path, "/usr/share/doc") {
			t.Errorf("rule %s: /usr holds the denied /usr/share/doc and must be expanded", r.Path)
		}
	}
	for _, want := range []string{"/usr/bin", "/proc/self"} {
		if !slices.Contains(paths, want) {
			t.Errorf("rules %q lack %s", paths, want)
		}
	}
	if slices.Contains(paths, "/no/such/system/path") {
		t.Error("a missing system path became a rule")
	}
}

func TestCheckFailsClosed(t *testing.T) {
	fsOnly := &Ruleset{}
	net := &Ruleset{DenyTCP: true}
	for _, tc := range []struct {
		rs   *Ruleset
		abi  int
		ok   bool
		want string
	}{
		{fsOnly, 0, false, "no Landlock"},
		{fsOnly, 2, false, "need Landlock ABI 3"},
		{fsOnly, 3, true, ""},
		{net, 3, false, "allow_network = false (TCP bind/connect rules) need Landlock ABI 4 or newer, and this kernel has Landlock ABI 3"},
		{net, 4, true, ""},
		{net, 7, true, ""},
	} {
		err := tc.rs.Check(tc.abi)
		if tc.ok != (err == nil) {
			t.Errorf("Check(%d) deny_tcp=%v = %v", tc.abi, tc.rs.DenyTCP, err)
			continue
		}
		if err != nil && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Check(%d) = %v, want ErrUnsupported with %q", tc.abi, err, tc.want)
		}
	}
}

// Protect denies like deny, whatever file_access allows, and is not part of
// the user's block (so unrestricted-with-deny validation is unaffected).
func TestCompileProtect(t *testing.T) {
	root := tree(t)
	rs, err := Compile(Spec{
		FileAccess:   FileAccess{AllowReadWrite: []string{root + "/b"}},
		Workspace:    root + "/ws",
		RunnerBinary: root + "/bin/agent-runner",
		System:       []SystemPath{},
		Protect:      []string{root + "/b/secret/key"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range rs.Rules {
		paths = append(paths, strings.TrimPrefix(r.Path, root+"/"))
		if within(root+"/b/secret/key", r.Path) && !r.File {
			t.Errorf("rule %s grants the protected key", r.Path)
		}
	}
	if slices.Contains(paths, "b") || slices.Contains(paths, "b/secret") || slices.Contains(paths, "b/secret/key") || !slices.Contains(paths, "b/other") {
		t.Errorf("rules %q: want b and b/secret expanded around the protected key", paths)
	}
}

// With Spec.Hide a deny inside an allow is exact: the allow stays whole and
// the denied path is listed for a mount; a missing denied path, and one
// written through a link, are still expanded around.
func TestCompileHide(t *testing.T) {
	root := tree(t)
	p := func(rel string) string { return filepath.Join(root, rel) }
	compile := func(fa FileAccess) *Ruleset {
		t.Helper()
		rs, err := Compile(Spec{FileAccess: fa, Workspace: p("ws"), TmpDir: p("tmp"), RunnerBinary: p("bin/agent-runner"),
			System: []SystemPath{}, Hide: true})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	rule := func(rs *Ruleset, path string) (Rule, bool) {
		for _, r := range rs.Rules {
			if r.Path == path {
				return r, true
			}
		}
		return Rule{}, false
	}

	rs := compile(FileAccess{AllowReadWrite: []string{p("b")}, Deny: []string{p("b/secret"), p("b/file.txt"), p("b/secret/key")}})
	if r, ok := rule(rs, p("b")); !ok || r.Access != ReadWrite {
		t.Errorf("b is not granted whole: %+v", rs.Rules)
	}
	want := []Hidden{{Path: p("b/file.txt")}, {Path: p("b/secret"), Dir: true}}
	if !slices.Equal(rs.Hide, want) {
		t.Errorf("Hide = %+v, want %+v (b/secret/key lies under b/secret)", rs.Hide, want)
	}

	// A deny outside every allow needs no mount.
	rs = compile(FileAccess{AllowRead: []string{p("a")}, Deny: []string{p("b/secret")}})
	if len(rs.Hide) != 0 {
		t.Errorf("Hide = %+v for a deny outside every allow", rs.Hide)
	}

	// A denied path that does not exist: b is expanded as before.
	rs = compile(FileAccess{AllowReadWrite: []string{p("b")}, Deny: []string{p("b/not-yet")}})
	if _, ok := rule(rs, p("b")); ok || len(rs.Hide) != 0 {
		t.Errorf("missing deny: b granted whole or hidden: %+v %+v", rs.Rules, rs.Hide)
	}

	// Written through the link blink -> b/secret: b/secret is hidden, and
	// the link's directory (root) is not granted whole.
	rs = compile(FileAccess{AllowReadWrite: []string{root}, Deny: []string{p("blink")}})
	if _, ok := rule(rs, root); ok {
		t.Errorf("the link's directory is granted whole: %+v", rs.Rules)
	}
	if !slices.Contains(rs.Hide, Hidden{Path: p("b/secret"), Dir: true}) {
		t.Errorf("Hide = %+v, want b/secret", rs.Hide)
	}
}

func TestExpandedDenies(t *testing.T) {
	fa := FileAccess{AllowRead: []string{"/srv"}, AllowReadWrite: []string{"/srv/b"}, Deny: []string{"/srv/b/secret", "/etc/x", "/srv"}}
	got := ExpandedDenies(fa)
	if len(got) != 2 || !strings.Contains(got[0], `deny "/srv/b/secret" lies inside allow_read "/srv"`) ||
		!strings.Contains(got[1], `allow_read_write "/srv/b"`) || !strings.Contains(got[1], "without the privilege to mount") {
		t.Errorf("ExpandedDenies = %q", got)
	}
}

// A deny the deployment already covers with a mount (Spec.Covered) is exact
// without Hide: the tree is granted whole and the child mounts nothing.
func TestCompileCovered(t *testing.T) {
	root := tree(t)
	p := func(rel string) string { return filepath.Join(root, rel) }
	fa := FileAccess{AllowReadWrite: []string{p("b")}, Deny: []string{p("b/secret"), p("b/file.txt")}}
	compile := func(covered ...string) *Ruleset {
		t.Helper()
		rs, err := Compile(Spec{FileAccess: fa, Workspace: p("ws"), TmpDir: p("tmp"), RunnerBinary: p("bin/agent-runner"),
			System: []SystemPath{}, Covered: covered})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	whole := func(rs *Ruleset) bool {
		for _, r := range rs.Rules {
			if r.Path == p("b") && r.Access == ReadWrite {
				return true
			}
		}
		return false
	}
	if rs := compile(p("b/secret"), p("b/file.txt")); !whole(rs) || len(rs.Hide) != 0 {
		t.Errorf("both covered: b whole %v, Hide %+v; rules %+v", whole(rs), rs.Hide, rs.Rules)
	}
	// One left uncovered: b is expanded around it again.
	if rs := compile(p("b/secret")); whole(rs) {
		t.Errorf("b/file.txt uncovered, yet b granted whole: %+v", rs.Rules)
	}
	if got := ExpandedDenies(fa, p("b/secret")); len(got) != 1 || !strings.Contains(got[0], "file.txt") {
		t.Errorf("ExpandedDenies with b/secret covered = %q", got)
	}
}
