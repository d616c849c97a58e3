package mirror

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/releasekey"
)

// TestReleaseScriptRefusesUnpinnedKey: `make release` (scripts/release.sh
// release) stops before GoReleaser runs when GPG_FINGERPRINT is not the
// pinned release key. GORELEASER is `false`, so a script that got past the
// check fails too, but without the refusal this test looks for.
func TestReleaseScriptRefusesUnpinnedKey(t *testing.T) {
	home, fpr := gpgHome(t, "not the release key")
	el, err := ReadKeys(releasekey.Armored)
	if err != nil {
		t.Fatal(err)
	}
	pinned := Fingerprint(el[0])
	script, err := filepath.Abs("../../scripts/release.sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ fingerprint, want string }{
		"another key":    {fpr, "is key " + fpr + ", not the pinned release key " + pinned},
		"a key not held": {pinned, "names 0 secret keys"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(script, "release")
			cmd.Env = append(os.Environ(), "GNUPGHOME="+home, "GPG_FINGERPRINT="+c.fingerprint,
				"VERSION=0.0.0-test", "GORELEASER=false", "GITHUB_TOKEN=")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("release.sh release succeeded:\n%s", out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("release.sh release: %v\n%s\nwant output containing %q", err, out, c.want)
			}
		})
	}
}
