package image

import (
	"regexp"
	"strings"
	"testing"
)

func TestContentHashStability(t *testing.T) {
	base := Spec{BaseImage: "img", Manager: ManagerApt, Packages: []string{"jq", "curl"}, Env: map[string]string{"A": "1", "B": "2"}}
	const baseID = "sha256:aaaa"
	h := ContentHash(baseID, base)
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(h) {
		t.Fatalf("hash %q is not 12 hex digits", h)
	}
	if again := ContentHash(baseID, base); again != h {
		t.Errorf("same inputs, different hash: %s vs %s", h, again)
	}
	reordered := base
	reordered.Packages = []string{"curl", "jq"}
	reordered.Env = map[string]string{"B": "2", "A": "1"}
	if got := ContentHash(baseID, reordered); got != h {
		t.Errorf("package or env order changed the hash: %s vs %s", got, h)
	}
	// The base reference is not hashed: its id is.
	renamed := base
	renamed.BaseImage = "other-name-same-id"
	if got := ContentHash(baseID, renamed); got != h {
		t.Errorf("base name changed the hash although its id did not")
	}

	changes := map[string]func() (string, Spec){
		"base id":       func() (string, Spec) { return "sha256:bbbb", base },
		"package added": func() (string, Spec) { s := base; s.Packages = []string{"jq", "curl", "git"}; return baseID, s },
		"package pin":   func() (string, Spec) { s := base; s.Packages = []string{"jq=1.6", "curl"}; return baseID, s },
		"env value":     func() (string, Spec) { s := base; s.Env = map[string]string{"A": "1", "B": "3"}; return baseID, s },
		"env name":      func() (string, Spec) { s := base; s.Env = map[string]string{"A": "1", "C": "2"}; return baseID, s },
		"env added": func() (string, Spec) {
			s := base
			s.Env = map[string]string{"A": "1", "B": "2", "C": ""}
			return baseID, s
		},
		"manager": func() (string, Spec) { s := base; s.Manager = ManagerAuto; return baseID, s },
		// Field boundaries: moving text between a name and a value must
		// not hash the same.
		"env boundary": func() (string, Spec) { s := base; s.Env = map[string]string{"A": "12", "B": ""}; return baseID, s },
	}
	seen := map[string]string{h: "original"}
	for name, f := range changes {
		id, s := f()
		got := ContentHash(id, s)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s gives the same hash as %s: %s", name, prev, got)
		}
		seen[got] = name
	}
}

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

func TestIsolatedTag(t *testing.T) {
	tests := map[[2]string]string{
		{"0.1.0", "meepa-sandbox:3f9a1c2b3d4e"}:                 "meepagateway-isolated:0.1.0-meepa-sandbox-3f9a1c2b3d4e",
		{"0.1.0-test", "meepa-sandbox:3f9a1c2b3d4e"}:            "meepagateway-isolated:0.1.0-test-meepa-sandbox-3f9a1c2b3d4e",
		{"0.1.0", "busybox"}:                                    "meepagateway-isolated:0.1.0-busybox",
		{"0.1.0", "ghcr.io/bogpad/meepagateway-sandbox:latest"}: "meepagateway-isolated:0.1.0-ghcr.io-bogpad-meepagateway-sandbox-latest-" + refHash("0.1.0", "ghcr.io/bogpad/meepagateway-sandbox:latest"),
		{"0.1.0+dirty", "localhost:5000/x/y:1"}:                 "meepagateway-isolated:0.1.0-dirty-localhost-5000-x-y-1-" + refHash("0.1.0+dirty", "localhost:5000/x/y:1"),
		{"", "img"}:                                             "meepagateway-isolated:v-img-" + refHash("", "img"),
	}
	for in, want := range tests {
		if got := IsolatedTag(in[0], in[1]); got != want {
			t.Errorf("IsolatedTag(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
	long := "registry.example/" + strings.Repeat("a", 150) + "@sha256:" + strings.Repeat("0", 64)
	long2 := "registry.example/" + strings.Repeat("a", 150) + "@sha256:" + strings.Repeat("1", 64)
	a, b := IsolatedTag("0.1.0", long), IsolatedTag("0.1.0", long2)
	for _, tag := range []string{a, b} {
		_, tg, _ := strings.Cut(tag, ":")
		if !tagRE.MatchString(tg) {
			t.Errorf("tag %q is not a valid Docker tag (len %d)", tg, len(tg))
		}
	}
	if a == b {
		t.Errorf("two long references truncated to the same tag %q", a)
	}
}

// Sanitising loses information; the tags of two different references never
// meet, whatever they sanitise to (issue 11: the two registry references
// below shared one isolation tag).
func TestIsolatedTagInjective(t *testing.T) {
	refs := []string{
		"registry.example.com/team:v1",
		"registry.example.com-team:v1",
		"registry.example.com-team-v1",
		"registry.example.com/team/v1",
		"registry.example.com:team-v1",
		"meepa-sandbox:3f9a1c2b3d4e",
		"meepa-sandbox-3f9a1c2b3d4e",
		"meepa/sandbox:3f9a1c2b3d4e",
		"x",
		"x-" + refHash("0.1.0", "x/y"),
		"x/y",
		"img@sha256:" + strings.Repeat("0", 64),
		"img:sha256-" + strings.Repeat("0", 64),
	}
	seen := map[string]string{}
	for _, r := range refs {
		tag := IsolatedTag("0.1.0", r)
		if prev, ok := seen[tag]; ok {
			t.Errorf("%q and %q share the isolation tag %q", prev, r, tag)
		}
		seen[tag] = r
		_, tg, _ := strings.Cut(tag, ":")
		if !tagRE.MatchString(tg) {
			t.Errorf("tag %q of %q is not a valid Docker tag", tg, r)
		}
	}
}

func TestPlanNames(t *testing.T) {
	s := Spec{BaseImage: "meepa-test/busybox:latest", Manager: ManagerApk, Packages: []string{"jq"}}
	n, err := Plan(s, "0.1.0", "")
	if err != nil {
		t.Fatal(err)
	}
	if n.ContentHash != "" || n.Image != "" || n.Isolated != "" || n.Dockerfile == "" {
		t.Errorf("unknown base id: want only the Dockerfile, got %+v", n)
	}
	n, _ = Plan(s, "0.1.0", "sha256:abc")
	if n.Image != "meepa-sandbox:"+n.ContentHash || n.Isolated != "meepagateway-isolated:0.1.0-meepa-sandbox-"+n.ContentHash {
		t.Errorf("names: %+v", n)
	}
	bare := Spec{BaseImage: "meepa-test/busybox:latest"}
	n, _ = Plan(bare, "0.1.0", "")
	if n.Image != bare.BaseImage || n.Isolated != "meepagateway-isolated:0.1.0-meepa-test-busybox-latest-"+refHash("0.1.0", bare.BaseImage) || n.Dockerfile != "" {
		t.Errorf("no container layer: %+v", n)
	}
}
