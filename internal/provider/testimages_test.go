package provider

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	dimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// debianBase is a minimal Debian tree made with debootstrap and imported
// into the daemon; it is kept between runs because making it downloads the
// whole base system.
const debianBase = "meepa-test/debian:bookworm-minbase"

var debianMu sync.Mutex

// ensureDebianBase imports a debootstrap minbase bookworm tree as debianBase
// unless the daemon has it. The mirror is the one this machine's apt uses.
func ensureDebianBase(t *testing.T, cli *client.Client) string {
	t.Helper()
	debianMu.Lock()
	defer debianMu.Unlock()
	ctx := context.Background()
	if _, err := cli.ImageInspect(ctx, debianBase); err == nil {
		return debianBase
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Fatalf("debootstrap is not installed (scripts/ensure-docker.sh installs it): %v", err)
	}
	mirror, err := aptMirror()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "meepa-debootstrap-")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove "+dir, func() error { return os.RemoveAll(dir) })
	root := filepath.Join(dir, "root")
	t.Logf("debootstrap --variant=minbase bookworm %s %s (first run only; the result is cached as %s)", root, mirror, debianBase)
	cmd := exec.Command("debootstrap", "--variant=minbase", "bookworm", root, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap: %v\n%s", err, lastLines(string(out), 20))
	}
	tarCmd := exec.Command("tar", "--numeric-owner", "-C", root, "-c", ".")
	stdout, err := tarCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tarCmd.Start(); err != nil {
		t.Fatal(err)
	}
	rc, err := cli.ImageImport(ctx, dimage.ImportSource{Source: stdout, SourceName: "-"}, debianBase, dimage.ImportOptions{
		Changes: []string{"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", `CMD ["/bin/bash"]`},
	})
	if err != nil {
		t.Fatalf("docker import: %v", err)
	}
	_, _ = bufio.NewReader(rc).WriteTo(discard{})
	_ = rc.Close()
	if err := tarCmd.Wait(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	if _, err := cli.ImageInspect(ctx, debianBase); err != nil {
		t.Fatalf("import %s: %v", debianBase, err)
	}
	return debianBase
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// aptMirror reads the Debian mirror from the machine's apt sources (deb822
// first, then the one-line format), so no mirror is ever written in code.
func aptMirror() (string, error) {
	if data, err := os.ReadFile("/etc/apt/sources.list.d/debian.sources"); err == nil {
		for _, stanza := range strings.Split(string(data), "\n\n") {
			var uri string
			suite := false
			for _, line := range strings.Split(stanza, "\n") {
				k, v, ok := strings.Cut(line, ":")
				if !ok || strings.HasPrefix(line, "#") {
					continue
				}
				switch strings.TrimSpace(k) {
				case "URIs":
					if f := strings.Fields(v); len(f) > 0 {
						uri = f[0]
					}
				case "Suites":
					for _, s := range strings.Fields(v) {
						suite = suite || s == "bookworm"
					}
				}
			}
			if uri != "" && suite {
				return uri, nil
			}
		}
	}
	if data, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "deb" && f[2] == "bookworm" {
				return f[1], nil
			}
		}
	}
	return "", fmt.Errorf("no bookworm mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
