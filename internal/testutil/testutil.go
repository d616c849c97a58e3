// Package testutil builds what tests need from scratch on the local machine:
// the agent-runner binary, a busybox base image (FROM scratch plus Debian's
// static busybox) and an isolation-style test image with agent-runner in it.
// No registry is reachable here, so nothing is ever pulled.
package testutil

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// BusyboxImage is the tag of the from-scratch busybox base image.
const BusyboxImage = "meepa-test/busybox:latest"

// RunnerImage is the tag of busybox plus agent-runner at
// /usr/local/bin/agent-runner, with HOME=/workspace, TMPDIR=/tmp and
// WORKDIR /workspace, like an isolation image.
const RunnerImage = "meepa-test/runner:latest"

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
func RunnerBinary(t testing.TB) string {
	t.Helper()
	runnerOnce.Do(func() {
		if p := os.Getenv("MEEPA_AGENT_RUNNER"); p != "" {
			runnerPath = p
			return
		}
		dir, err := os.MkdirTemp("", "meepa-runner-")
		if err != nil {
			runnerErr = err
			return
		}
		runnerPath = filepath.Join(dir, "agent-runner")
		cmd := exec.Command("go", "build", "-trimpath", "-o", runnerPath, "./cmd/agent-runner")
		cmd.Dir = RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
		if out, err := cmd.CombinedOutput(); err != nil {
			runnerErr = fmt.Errorf("go build agent-runner: %v\n%s", err, out)
		}
	})
	if runnerErr != nil {
		t.Fatal(runnerErr)
	}
	return runnerPath
}

// Docker connects to the daemon (DOCKER_HOST or the local socket) or fails
// the test.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := engine.Connect(context.Background(), engine.Options{})
	if err != nil {
		t.Fatalf("docker: %v (run scripts/ensure-docker.sh)", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var imageMu sync.Mutex

// EnsureBusybox builds BusyboxImage from /bin/busybox (Debian's
// busybox-static) when the daemon does not have it yet.
func EnsureBusybox(t testing.TB, cli *client.Client) string {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	if exists(cli, BusyboxImage) {
		return BusyboxImage
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("read /bin/busybox (apt-get install busybox-static): %v", err)
	}
	// busybox --install would need a writable rootfs at run time; make the
	// applet links at build time instead, from a shell that exists.
	dockerfile := "FROM scratch\nCOPY busybox /bin/busybox\n" +
		"RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox --install -s /bin && mkdir -p /tmp /etc /workspace && echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd && echo 'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh' >> /etc/passwd && echo 'root:x:0:' > /etc/group && echo 'nogroup:x:65534:' >> /etc/group\"]\n" +
		"ENV PATH=/usr/local/bin:/usr/bin:/bin\n"
	buildImage(t, cli, BusyboxImage, dockerfile, map[string][]byte{"busybox": bb})
	return BusyboxImage
}

// EnsureRunnerImage builds RunnerImage from the busybox base and the current
// agent-runner. It is rebuilt in every test process so it never holds a stale
// binary; the build is cached by the daemon when nothing changed.
func EnsureRunnerImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	EnsureBusybox(t, cli)
	bin, err := os.ReadFile(RunnerBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	imageMu.Lock()
	defer imageMu.Unlock()
	dockerfile := "FROM " + BusyboxImage + "\n" +
		"COPY agent-runner /usr/local/bin/agent-runner\n" +
		"ENV HOME=/workspace TMPDIR=/tmp\nWORKDIR /workspace\n"
	buildImage(t, cli, RunnerImage, dockerfile, map[string][]byte{"agent-runner": bin})
	return RunnerImage
}

func exists(cli *client.Client, ref string) bool {
	_, err := cli.ImageInspect(context.Background(), ref)
	return err == nil
}

func buildImage(t testing.TB, cli *client.Client, tag, dockerfile string, files map[string][]byte) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files["Dockerfile"] = []byte(dockerfile)
	for name, data := range files {
		mode := int64(0o644)
		if name != "Dockerfile" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.ImageBuild(context.Background(), &buf, build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		Labels:      engine.Labels("test-image", nil),
	})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	var log strings.Builder
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, &log, 0, false, nil); err != nil {
		t.Fatalf("build %s: %v\n%s", tag, err, log.String())
	}
	_, _ = io.Copy(io.Discard, resp.Body)
}

// RequireDocker skips unless TF_ACC or MEEPA_DOCKER_TESTS is set: tests that
// need a daemon run under `make testacc` (and CI), not plain `make test`.
func RequireDocker(t testing.TB) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" && os.Getenv("MEEPA_DOCKER_TESTS") == "" {
		t.Skip("needs a Docker daemon: set TF_ACC=1 (make testacc)")
	}
}
