package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	dimage "github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Base images of this file's tests. They carry names of their own so that
// the isolation tags derived from them never collide with other packages'
// tests on the shared daemon.
const (
	// bareBase prefixes the busybox test image under a name of this test
	// process (see ensureBareBase).
	bareBase = "meepa-test/tf-acc-image-bare"
	// fakeApkBase is busybox with an `apk` that records what it was asked
	// to install in /var/lib/fake-apk/installed, and fails, as apk does,
	// for a package named "broken". The real package manager is exercised
	// by TestAccIsolationImage_aptInstall; this one keeps the lifecycle
	// test fast and offline.
	fakeApkBase = "meepa-test/tf-acc-image-fakeapk:latest"
)

const fakeApk = `#!/bin/sh
[ "$1" = add ] || { echo "fake apk: only 'add' is supported" >&2; exit 1; }
shift
mkdir -p /var/lib/fake-apk
for a in "$@"; do
  case "$a" in
    --*) ;;
    broken) echo "ERROR: unable to select packages:" >&2; echo "  broken (no such package)" >&2; exit 1 ;;
    *) echo "(1/1) Installing $a"; echo "$a" >> /var/lib/fake-apk/installed ;;
  esac
done
`

var fixtureMu sync.Mutex

// runID makes the images of one test process its own: it goes into env
// vars (so into content hashes) and base names, so that two runs of these
// tests on the shared daemon (two worktrees) never touch each other's tags.
var runID = strconv.Itoa(os.Getpid())

// ensureBareBase tags the busybox test image as bareBase-<runID>:latest; the
// tag goes away with the test.
func ensureBareBase(t *testing.T, cli *client.Client) string {
	t.Helper()
	testutil.EnsureBusybox(t, cli)
	ref := bareBase + "-" + runID + ":latest"
	if err := cli.ImageTag(context.Background(), testutil.BusyboxImage, ref); err != nil {
		t.Fatalf("tag %s: %v", ref, err)
	}
	testutil.Cleanup(t, "remove image "+ref, func() error { return removeImage(cli, ref) })
	return ref
}

func ensureFakeApkBase(t *testing.T, cli *client.Client) string {
	t.Helper()
	testutil.EnsureBusybox(t, cli)
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	testutil.BuildImage(t, cli, fakeApkBase, "FROM "+testutil.BusyboxImage+"\nCOPY apk /usr/bin/apk\n", map[string][]byte{"apk": []byte(fakeApk)})
	return fakeApkBase
}

// runIn is `docker run --rm ref cmd...` through the Engine API; it returns
// the combined output and the exit code.
func runIn(cli *client.Client, ref string, cmd ...string) (_ string, _ int, err error) {
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: ref, Cmd: cmd, Labels: engine.Labels("test", nil)},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return "", 0, fmt.Errorf("create: %w", err)
	}
	defer func() {
		err = errors.Join(err, testutil.Gone(cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})))
	}()
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return "", 0, fmt.Errorf("start: %w", err)
	}
	var code int
	select {
	case w := <-waitC:
		code = int(w.StatusCode)
	case err := <-errC:
		return "", 0, fmt.Errorf("wait: %w", err)
	}
	logs, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", code, err
	}
	defer func() { _ = logs.Close() }()
	var out bytes.Buffer
	_, err = stdcopy.StdCopy(&out, &out, logs)
	return out.String(), code, err
}

// imageID is the id at ref, "" when there is none.
func imageID(t *testing.T, cli *client.Client, ref string) string {
	t.Helper()
	ins, err := cli.ImageInspect(context.Background(), ref)
	if cerrdefs.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("inspect %s: %v", ref, err)
	}
	return ins.ID
}

// removeImage removes ref (or id); an image already gone, or a ref never
// filled in (a step that failed first), is done.
func removeImage(cli *client.Client, ref string) error {
	if ref == "" {
		return nil
	}
	_, err := cli.ImageRemove(context.Background(), ref, dimage.RemoveOptions{PruneChildren: true})
	return testutil.Gone(err)
}

// buildRunnerVersion builds agent-runner with another version stamped in:
// a new runner binary, as a release would bring.
func buildRunnerVersion(t *testing.T, version string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent-runner")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags",
		"-X github.com/bogpad/terraform-provider-meepa/internal/version.Version="+version, "-o", p, "./cmd/agent-runner")
	cmd.Dir = testutil.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build agent-runner: %v\n%s", err, out)
	}
	return p
}

// patchedArchBinary copies the agent-runner with its ELF machine set to
// aarch64 (amd64 hosts) or x86-64 (others): a binary the daemon can't run.
func patchedArchBinary(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	machine := uint16(183) // EM_AARCH64
	if data[18] == 183 {
		machine = 62 // EM_X86_64
	}
	data[18], data[19] = byte(machine), byte(machine>>8)
	p := filepath.Join(t.TempDir(), "agent-runner-foreign")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
