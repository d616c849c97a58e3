// Package testimage builds the small local images that the tests and the
// benchmark run on, from files on this machine: no registry is reachable, so
// nothing is ever pulled. testutil wraps it for tests; cmd/meepa-bench uses
// it directly.
package testimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
)

// BusyboxPath is Debian's static busybox (package busybox-static).
const BusyboxPath = "/bin/busybox"

// busyboxDockerfile makes a minimal userland FROM scratch. The applet links
// are made at build time, since containers here run with a read-only rootfs;
// /etc/passwd knows root and nobody, and /tmp is world-writable.
const busyboxDockerfile = "FROM scratch\nCOPY busybox /bin/busybox\n" +
	"RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox --install -s /bin && mkdir -p /tmp /etc /workspace && chmod 1777 /tmp && " +
	"echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd && echo 'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh' >> /etc/passwd && " +
	"echo 'root:x:0:' > /etc/group && echo 'nogroup:x:65534:' >> /etc/group\"]\n" +
	"ENV PATH=/usr/local/bin:/usr/bin:/bin\n"

// RunnerDockerfile layers agent-runner onto base the way an isolation image
// does: the binary at /usr/local/bin/agent-runner, HOME=/workspace,
// TMPDIR=/tmp, WORKDIR /workspace.
func RunnerDockerfile(base string) string {
	return "FROM " + base + "\n" +
		"COPY agent-runner /usr/local/bin/agent-runner\n" +
		"ENV HOME=/workspace TMPDIR=/tmp\nWORKDIR /workspace\n"
}

// Exists reports whether the daemon has an image by that reference.
func Exists(ctx context.Context, cli client.APIClient, ref string) bool {
	_, err := cli.ImageInspect(ctx, ref)
	return err == nil
}

// Busybox builds the busybox base as tag unless the daemon has it already.
func Busybox(ctx context.Context, cli client.APIClient, tag string) error {
	if Exists(ctx, cli, tag) {
		return nil
	}
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return fmt.Errorf("read %s (apt-get install busybox-static): %w", BusyboxPath, err)
	}
	return Build(ctx, cli, tag, busyboxDockerfile, map[string][]byte{"busybox": bb})
}

// Runner builds tag from base plus the agent-runner binary at runnerPath.
func Runner(ctx context.Context, cli client.APIClient, tag, base, runnerPath string) error {
	bin, err := os.ReadFile(runnerPath)
	if err != nil {
		return fmt.Errorf("read agent-runner: %w", err)
	}
	return Build(ctx, cli, tag, RunnerDockerfile(base), map[string][]byte{"agent-runner": bin})
}

// Build builds tag from a Dockerfile and the files beside it (each made
// executable), labelled as a test image. A failed build's error carries the
// build log.
func Build(ctx context.Context, cli client.APIClient, tag, dockerfile string, files map[string][]byte) error {
	return BuildLabelled(ctx, cli, tag, dockerfile, files, engine.Labels("test-image", nil))
}

// BuildLabelled is Build with the given labels in place of the test
// image's: a test that needs an image looking like one the provider made
// (its component label) builds it so.
func BuildLabelled(ctx context.Context, cli client.APIClient, tag, dockerfile string, files map[string][]byte, labels map[string]string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := write("Dockerfile", 0o644, []byte(dockerfile)); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	for name, data := range files {
		if err := write(name, 0o755, data); err != nil {
			return fmt.Errorf("build %s: %w", tag, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	resp, err := cli.ImageBuild(ctx, &buf, build.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, Labels: labels,
	})
	if err != nil {
		return fmt.Errorf("build %s: %w", tag, err)
	}
	defer func() { _ = resp.Body.Close() }() // read-only stream
	var log strings.Builder
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, &log, 0, false, nil); err != nil {
		return fmt.Errorf("build %s: %w\n%s", tag, err, log.String())
	}
	return nil
}
