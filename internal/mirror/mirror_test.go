package mirror

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// writeZip writes a zip of name -> (content, mode).
func writeZip(t *testing.T, path string, files map[string]string, mode os.FileMode) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, body := range files {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func sumOf(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(raw)
	return hex.EncodeToString(s[:])
}

// h1Of is Terraform's "h1:" package hash written out from its definition
// (dirhash Hash1): sha256 over sorted "<sha256 hex>  <name>\n" lines, base64.
func h1Of(files map[string]string) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		s := sha256.Sum256([]byte(files[n]))
		fmt.Fprintf(&b, "%x  %s\n", s, n)
	}
	s := sha256.Sum256([]byte(b.String()))
	return "h1:" + base64.StdEncoding.EncodeToString(s[:])
}

// fakeDist lays out a two-platform release like GoReleaser's, signed by
// the test's pinned key (pinnedTrust), and returns it with the files each
// zip holds.
func fakeDist(t *testing.T) (Release, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	r := Release{Dist: dir, Type: "meepa", Version: "1.2.3", Runners: []string{"amd64", "arm64"}, Namespace: "bogpad", Host: "registry.terraform.io"}
	files := map[string]string{
		"terraform-provider-meepa_v1.2.3": "provider",
		"agent-runner-linux-amd64":        "runner amd64",
		"agent-runner-linux-arm64":        "runner arm64",
	}
	var sums strings.Builder
	for _, p := range []string{"linux_amd64", "darwin_arm64"} {
		name := "terraform-provider-meepa_1.2.3_" + p + ".zip"
		writeZip(t, filepath.Join(dir, name), files, 0o755)
		fmt.Fprintf(&sums, "%s  %s\n", sumOf(t, filepath.Join(dir, name)), name)
	}
	man := filepath.Join(dir, "terraform-provider-meepa_1.2.3_manifest.json")
	if err := os.WriteFile(man, []byte(`{"version":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&sums, "%s  %s\n", sumOf(t, man), filepath.Base(man))
	if err := os.WriteFile(r.SumsFile(), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	signSums(t, r, testKeys(t).pinned)
	return r, files
}

func TestCheckAndInstall(t *testing.T) {
	r, files := fakeDist(t)
	_, archives, err := r.Check(pinnedTrust(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != 2 || archives[0].Platform != "darwin_arm64" || archives[1].Platform != "linux_amd64" {
		t.Fatalf("archives = %+v", archives)
	}
	want := h1Of(files)
	for _, a := range archives {
		if a.H1 != want {
			t.Errorf("%s: h1 = %s, want %s", a.Platform, a.H1, want)
		}
	}

	mdir := t.TempDir()
	dst, err := r.Install(mdir, archives)
	if err != nil {
		t.Fatal(err)
	}
	if dst != filepath.Join(mdir, "registry.terraform.io", "bogpad", "meepa") {
		t.Fatalf("dst = %s", dst)
	}
	var vi VersionIndex
	raw, err := os.ReadFile(filepath.Join(dst, "1.2.3.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &vi); err != nil {
		t.Fatal(err)
	}
	la := vi.Archives["linux_amd64"]
	if la.URL != "terraform-provider-meepa_1.2.3_linux_amd64.zip" || len(la.Hashes) != 2 ||
		la.Hashes[0] != want || la.Hashes[1] != "zh:"+archives[1].SHA256 {
		t.Fatalf("linux_amd64 = %+v", la)
	}
	if got := sumOf(t, filepath.Join(dst, la.URL)); got != archives[1].SHA256 {
		t.Fatalf("copied zip sha256 %s, want %s", got, archives[1].SHA256)
	}

	// Installing again keeps versions installed before.
	if err := os.WriteFile(filepath.Join(dst, "index.json"), []byte(`{"versions":{"1.0.0":{}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Install(mdir, archives); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(filepath.Join(dst, "index.json"))
	var idx Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if _, ok := idx.Versions["1.0.0"]; !ok {
		t.Errorf("index lost 1.0.0: %s", raw)
	}
	if _, ok := idx.Versions["1.2.3"]; !ok {
		t.Errorf("index lacks 1.2.3: %s", raw)
	}
}

func TestCheckRejects(t *testing.T) {
	cases := map[string]struct {
		spoil func(t *testing.T, r *Release)
		want  string
	}{
		"wrong checksum": {func(t *testing.T, r *Release) {
			p := filepath.Join(r.Dist, "terraform-provider-meepa_1.2.3_linux_amd64.zip")
			raw, _ := os.ReadFile(p)
			raw[len(raw)/2] ^= 0xff
			if err := os.WriteFile(p, raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "SHA256SUMS says"},
		"runner missing": {func(t *testing.T, r *Release) {
			r.Runners = append(r.Runners, "riscv64")
		}, "no agent-runner-linux-riscv64"},
		"wrong version inside": {func(t *testing.T, r *Release) {
			p := filepath.Join(r.Dist, "terraform-provider-meepa_1.2.3_linux_amd64.zip")
			writeZip(t, p, map[string]string{"terraform-provider-meepa_v9.9.9": "x", "agent-runner-linux-amd64": "y", "agent-runner-linux-arm64": "z"}, 0o755)
			rewriteSums(t, r)
		}, "no terraform-provider-meepa_v1.2.3"},
		"not executable": {func(t *testing.T, r *Release) {
			p := filepath.Join(r.Dist, "terraform-provider-meepa_1.2.3_linux_amd64.zip")
			writeZip(t, p, map[string]string{"terraform-provider-meepa_v1.2.3": "x", "agent-runner-linux-amd64": "y", "agent-runner-linux-arm64": "z"}, 0o644)
			rewriteSums(t, r)
		}, "not executable"},
		"manifest not summed": {func(t *testing.T, r *Release) {
			raw, _ := os.ReadFile(r.SumsFile())
			var keep []string
			for _, l := range strings.Split(string(raw), "\n") {
				if !strings.Contains(l, "manifest") {
					keep = append(keep, l)
				}
			}
			if err := os.WriteFile(r.SumsFile(), []byte(strings.Join(keep, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			signSums(t, *r, testKeys(t).pinned)
		}, "manifest.json is not in"},
		"listed file gone": {func(t *testing.T, r *Release) {
			if err := os.Remove(filepath.Join(r.Dist, "terraform-provider-meepa_1.2.3_darwin_arm64.zip")); err != nil {
				t.Fatal(err)
			}
		}, "darwin_arm64.zip"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r, _ := fakeDist(t)
			c.spoil(t, &r)
			_, _, err := r.Check(pinnedTrust(t))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Check() error = %v, want one containing %q", err, c.want)
			}
		})
	}
}

// rewriteSums recomputes SHA256SUMS for the files it lists and signs it
// with the pinned key, as a release that was built broken (not tampered
// with afterwards) would have.
func rewriteSums(t *testing.T, r *Release) {
	t.Helper()
	sums, err := ReadSums(r.SumsFile())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for name := range sums {
		fmt.Fprintf(&b, "%s  %s\n", sumOf(t, filepath.Join(r.Dist, name)), name)
	}
	if err := os.WriteFile(r.SumsFile(), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	signSums(t, *r, testKeys(t).pinned)
}
