package image

import (
	"slices"
	"testing"
)

func TestReplaceReasons(t *testing.T) {
	spec := Spec{BaseImage: "base:1", Manager: ManagerApt, Packages: []string{"jq", "curl"}, Env: map[string]string{"A": "1"}}
	names, err := Plan(spec, "0.1.0", "sha256:base")
	if err != nil {
		t.Fatal(err)
	}
	bin := Binary{SHA256: "runner-1"}
	prior := Prior{Spec: spec, State: planned(spec, names, bin, "sha256:base")}

	// The same inputs, in another package order: nothing to replace.
	same := spec
	same.Packages = []string{"curl", "jq"}
	if why := replaceReasons(same, prior, names, bin, "sha256:base"); len(why) != 0 {
		t.Fatalf("unchanged image: replace %v", why)
	}

	cases := []struct {
		name   string
		change func(s *Spec, b *Binary, baseID *string, st *State)
		want   []string
	}{
		{"base image", func(s *Spec, _ *Binary, _ *string, _ *State) { s.BaseImage = "base:2" }, []string{"base_image"}},
		{"packages", func(s *Spec, _ *Binary, _ *string, _ *State) { s.Packages = []string{"jq"} }, []string{"packages", "content_hash", "isolated_image"}},
		{"env", func(s *Spec, _ *Binary, _ *string, _ *State) { s.Env = map[string]string{"A": "2"} }, []string{"env_vars", "content_hash", "isolated_image"}},
		{"new runner", func(_ *Spec, b *Binary, _ *string, _ *State) { b.SHA256 = "runner-2" }, []string{"runner_sha256"}},
		{"base moved", func(_ *Spec, _ *Binary, id *string, _ *State) { *id = "sha256:other" }, []string{"content_hash", "isolated_image"}},
		{"base gone keeps the image", func(_ *Spec, _ *Binary, id *string, _ *State) { *id = "" }, nil},
		{"changed out of band", func(_ *Spec, _ *Binary, id *string, st *State) { *id = ""; st.ContentHash = "" }, []string{"content_hash"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, b, id, p := spec, bin, "sha256:base", prior
			c.change(&s, &b, &id, &p.State)
			n, err := Plan(s, "0.1.0", id)
			if err != nil {
				t.Fatal(err)
			}
			if got := replaceReasons(s, p, n, b, id); !slices.Equal(got, c.want) {
				t.Fatalf("replace = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPlannedKnowsWhatPlanKnows(t *testing.T) {
	spec := Spec{BaseImage: "base:1", Manager: ManagerNone}
	n, err := Plan(spec, "0.1.0", "sha256:base")
	if err != nil {
		t.Fatal(err)
	}
	st := planned(spec, n, Binary{SHA256: "r"}, "sha256:base")
	// Without a container layer the image is the base itself.
	if st.ImageID != "sha256:base" || st.Image != "base:1" || st.Isolated == "" || st.Dockerfile != "" || st.RunnerSHA256 != "r" {
		t.Fatalf("planned = %+v", st)
	}
	if st.IsolatedID != "" || st.RunnerVersion != "" {
		t.Fatalf("ids and version are known only after the build: %+v", st)
	}
}
