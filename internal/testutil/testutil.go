// Package testutil builds what tests need from scratch on the local machine:
// the agent-runner binary, a busybox base image (FROM scratch plus Debian's
// static busybox) and an isolation-style test image with agent-runner in it.
// No registry is reachable here, so nothing is ever pulled.
package testutil

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
)

// BusyboxImage is the tag of the from-scratch busybox base image.
const BusyboxImage = "meepa-test/busybox:latest"

// runnerRepo is the repository of the test runner images: busybox plus
// agent-runner at /usr/local/bin/agent-runner, with HOME=/workspace,
// TMPDIR=/tmp and WORKDIR /workspace, like an isolation image.
const runnerRepo = "meepa-test/runner"

// RepoRoot is the module's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	runnerOnce sync.Once
	runnerPath string
	runnerErr  error
)

// RunnerBinary builds cmd/agent-runner once per test process as a static
// linux binary and returns its path. MEEPA_AGENT_RUNNER, when set, is used
// instead.
//
// The binary (about 100 MB) is kept under its content hash in
// $TMPDIR/meepa-test-runner, shared by every test process that builds the
// same code, and copies unused for a day are removed: one per process,
// never removed, filled this machine's disk until the cluster's node
// reported disk pressure.
func RunnerBinary(t testing.TB) string {
	t.Helper()
	runnerOnce.Do(func() {
		if p := os.Getenv("MEEPA_AGENT_RUNNER"); p != "" {
			runnerPath = p
			return
		}
		runnerPath, runnerErr = buildRunner(filepath.Join(os.TempDir(), "meepa-test-runner"))
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return runnerPath
}

func buildRunner(cache string) (string, error) {
	// Host mode runs it under the agent's own uid, which must reach it.
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(cache, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(work) }()
	if err := os.Chmod(work, 0o755); err != nil {
		return "", err
	}
	built := filepath.Join(work, "agent-runner")
	cmd := exec.Command("go", "build", "-trimpath", "-o", built, "./cmd/agent-runner")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build agent-runner: %w\n%s", err, out)
	}
	f, err := os.Open(built)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	_ = f.Close()
	if err != nil {
		return "", err
	}
	final := filepath.Join(cache, hex.EncodeToString(h.Sum(nil))[:16])
	// Another process may have put the same build there first: then its
	// copy is as good as this one.
	if err := os.Rename(work, final); err != nil {
		if _, statErr := os.Stat(filepath.Join(final, "agent-runner")); statErr != nil {
			return "", fmt.Errorf("keep agent-runner: %w", err)
		}
	}
	now := time.Now()
	_ = os.Chtimes(final, now, now) // in use: not pruned below
	if old, err := os.ReadDir(cache); err == nil {
		for _, e := range old {
			if info, err := e.Info(); err == nil && e.Name() != filepath.Base(final) && now.Sub(info.ModTime()) > 24*time.Hour {
				_ = os.RemoveAll(filepath.Join(cache, e.Name()))
			}
		}
	}
	return filepath.Join(final, "agent-runner"), nil
}

// Docker connects to the daemon (DOCKER_HOST or the local socket) or fails
// the test.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := engine.Connect(context.Background(), engine.Options{})
	if err != nil {
		t.Fatalf("docker: %v (run scripts/ensure-docker.sh)", err)
	}
	Cleanup(t, "docker client close", cli.Close)
	return cli
}

var imageMu sync.Mutex

// EnsureBusybox builds BusyboxImage from /bin/busybox (Debian's
// busybox-static) when the daemon does not have it yet.
func EnsureBusybox(t testing.TB, cli *client.Client) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	if err := testimage.Busybox(context.Background(), cli, BusyboxImage); err != nil {
		t.Fatal(err)
	}
	return BusyboxImage
}

// EnsureRunnerImage returns a runner image with this process's agent-runner,
// tagged by the binary's content hash (meepa-test/runner:<sha12>): a shared
// tag would be rebuilt under a running test by another test process with
// another build of the binary.
func EnsureRunnerImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	EnsureBusybox(t, cli)
	bin := RunnerBinary(t)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	tag := runnerRepo + ":" + hex.EncodeToString(sum[:])[:12]
	imageMu.Lock()
	defer imageMu.Unlock()
	if testimage.Exists(context.Background(), cli, tag) {
		return tag
	}
	if err := testimage.Runner(context.Background(), cli, tag, BusyboxImage, bin); err != nil {
		t.Fatal(err)
	}
	pruneRunnerImages(cli, tag)
	return tag
}

// pruneRunnerImages removes the runner images of earlier builds made more
// than a day ago (about 110 MB each, one per version of the code tested);
// one a container still uses stays (the daemon refuses).
func pruneRunnerImages(cli *client.Client, keep string) {
	ctx := context.Background()
	list, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", runnerRepo))})
	if err != nil {
		return
	}
	for _, img := range list {
		if time.Since(time.Unix(img.Created, 0)) < 24*time.Hour {
			continue
		}
		for _, ref := range img.RepoTags {
			if ref != keep {
				_, _ = cli.ImageRemove(ctx, ref, image.RemoveOptions{})
			}
		}
	}
}

// BuildImage builds tag from a Dockerfile and the files beside it, or fails
// the test.
func BuildImage(t testing.TB, cli *client.Client, tag, dockerfile string, files map[string][]byte) {
	t.Helper()
	if err := testimage.Build(context.Background(), cli, tag, dockerfile, files); err != nil {
		t.Fatal(err)
	}
}

// RequireDocker skips unless TF_ACC or MEEPA_DOCKER_TESTS is set: tests that
// need a daemon run under `make testacc` (and CI), not plain `make test`.
func RequireDocker(t testing.TB) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" && os.Getenv("MEEPA_DOCKER_TESTS") == "" {
		t.Skip("needs a Docker daemon: set TF_ACC=1 (make testacc)")
	}
}

// SharedTempDir is a temporary directory others may traverse (t.TempDir's
// are 0700): a root runner runs a host-mode agent under the agent's own
// uid, which must reach its workspace and what its rules grant.
func SharedTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
