package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// CurlKit copies this machine's curl and every library it loads into dir
// (dir/curl, dir/lib/...), for a sandbox that has no curl of its own: the
// workspace of a per-message container, or a path a host-mode agent may
// read. It returns the command that runs it there, through the copied
// dynamic loader with the copied libraries (no LD_LIBRARY_PATH, which a
// sandbox's environment refuses). scripts/ensure-docker.sh installs curl.
func CurlKit(t testing.TB, dir, inSandbox string) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("needs curl (scripts/ensure-docker.sh installs it): %v", err)
	}
	out, err := exec.Command("ldd", curl).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", curl, err)
	}
	lib := filepath.Join(dir, "lib")
	Must(t, os.MkdirAll(lib, 0o755))
	loader := ""
	for _, m := range regexp.MustCompile(`(?m)(/\S+\.so[.\d]*)\s+\(0x`).FindAllStringSubmatch(string(out), -1) {
		copyFile(t, m[1], filepath.Join(lib, filepath.Base(m[1])), 0o755)
		if regexp.MustCompile(`/ld-linux`).MatchString(m[1]) {
			loader = filepath.Base(m[1])
		}
	}
	if loader == "" {
		t.Fatalf("ldd %s names no dynamic loader:\n%s", curl, out)
	}
	copyFile(t, curl, filepath.Join(dir, "curl"), 0o755)
	return filepath.Join(inSandbox, "lib", loader) + " --library-path " + filepath.Join(inSandbox, "lib") + " " + filepath.Join(inSandbox, "curl")
}

func copyFile(t testing.TB, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	Must(t, err)
	Must(t, os.WriteFile(to, b, mode))
}
