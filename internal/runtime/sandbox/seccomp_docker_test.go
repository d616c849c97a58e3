package sandbox

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// uringImage is the busybox test image with testutil.URingProbe at
// /uring-probe.
func uringImage(t *testing.T) string {
	t.Helper()
	cli := testutil.Docker(t)
	bin := testutil.URingProbe(t)
	tag := "meepa-test/uring-probe:" + runToken
	testutil.BuildImage(t, cli, tag, "FROM "+testutil.EnsureBusybox(t, cli)+"\nCOPY uring-probe /uring-probe\n", map[string][]byte{"uring-probe": bin})
	testutil.Cleanup(t, "remove "+tag, func() error {
		_, err := cli.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true})
		return testutil.Gone(err)
	})
	return tag
}

// A per-message container cannot set up an io_uring, on every engine: the
// product's own profile refuses it. The control: the same probe in a plain
// container under the daemon's default profile, which on Docker before 25.0
// (Debian 12's 20.10 among them) lets it through.
func TestDockerMessageContainerRefusesIOURing(t *testing.T) {
	testutil.RequireDocker(t)
	img := uringImage(t)
	spec := Spec{AgentID: uniq("tf-acc-sbx-uring"), Workspace: t.TempDir(), Image: img, Command: []string{"sh", "-c", "cat >/dev/null; /uring-probe"}}
	if out := runOnce(t, spec, "m-uring"); out.ExitCode != 13 && out.ExitCode != 38 {
		t.Errorf("per-message container: io_uring_setup exit %d (%q), want 13 (EPERM) or 38 (ENOSYS)", out.ExitCode, out.Stdout)
	}
	uringControl(t, img)
}

// Under gVisor the product's profile is in force too: runsc, registered
// with --oci-seccomp (scripts/runsc.sh), applies it inside the sandbox, so
// io_uring_setup fails with the profile's EPERM (13) on gVisor's kernel.
// Without the flag runsc ignores a container's seccomp profile, and only
// gVisor's own io_uring setting would stand between the two.
func TestDockerMessageContainerRefusesIOURingRunsc(t *testing.T) {
	testutil.RequireDocker(t)
	testutil.RequireRuntime(t, testutil.Docker(t), "runsc")
	spec := Spec{AgentID: uniq("tf-acc-sbx-uring-runsc"), Workspace: t.TempDir(), Image: uringImage(t),
		Command: []string{"sh", "-c", "cat >/dev/null; uname -r >&2; /uring-probe"}, Runtime: "runsc"}
	if out := runOnce(t, spec, "m-uring"); out.ExitCode != 13 || !strings.Contains(string(out.StderrTail), "-gvisor") {
		t.Errorf("under runsc: io_uring_setup exit %d (stdout %q, stderr %q), want 13 (EPERM, the product's profile) on gVisor's kernel",
			out.ExitCode, out.Stdout, out.StderrTail)
	}
}

// runOnce runs one message in a cold container of spec and returns its outcome.
func runOnce(t *testing.T, spec Spec, messageID string) Outcome {
	t.Helper()
	ctx := context.Background()
	cli := testutil.Docker(t)
	d, err := NewDocker(ctx, cli, DockerOptions{Spec: spec, ChownWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "close backend", func() error { return d.Close(context.Background()) })
	out, err := d.Run(ctx, Job{MessageID: messageID, Stdin: []byte("{}"), Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// uringControl runs the probe as Docker runs any container (no security
// options): Docker before 25.0 lets io_uring through.
func uringControl(t *testing.T, img string) {
	t.Helper()
	ctx := context.Background()
	cli := testutil.Docker(t)
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"/uring-probe"}, User: "4000:4000"},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove the control container", func() error {
		return testutil.Gone(cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}))
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	var code int64
	select {
	case w := <-waitC:
		code = w.StatusCode
	case err := <-errC:
		t.Fatal(err)
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	major, _ := strconv.Atoi(strings.SplitN(v.Version, ".", 2)[0])
	switch {
	case code == 0:
		t.Logf("control: io_uring_setup works under Docker %s's default profile", v.Version)
	case major >= 25 && (code == 13 || code == 38):
		t.Logf("control: Docker %s's default profile refuses io_uring too (exit %d)", v.Version, code)
	default:
		t.Errorf("control: io_uring_setup in a plain container under Docker %s exited %d, want 0 (the probe or the kernel is at fault)", v.Version, code)
	}
}
