package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestProxyInHardenedContainer runs the proxy the way threegate_network
// does: as nobody, read-only rootfs, no capabilities, no-new-privileges,
// memory and pids limits, with the command line from Args. The network is
// "none": the upstream is busybox httpd on the container's own loopback,
// allowed by IP literal.
func TestProxyInHardenedContainer(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureBusybox(t, cli)
	bin := testutil.RunnerBinary(t)

	name := fmt.Sprintf("meepa-test-proxy-%08x", rand.Uint32())
	cmd := append([]string{"/usr/local/bin/agent-runner"}, Args(Settings{Allow: mustAllow(t, "127.0.0.1:8080")})...)
	pids := int64(64)
	created, err := cli.ContainerCreate(ctx, &container.Config{
		Image:  image,
		Cmd:    cmd,
		User:   "65534:65534",
		Labels: engine.Labels("proxy-test", nil),
	}, &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Resources:      container.Resources{Memory: 64 << 20, MemorySwap: 64 << 20, PidsLimit: &pids},
		Mounts: []mount.Mount{{
			Type: mount.TypeBind, Source: bin, Target: "/usr/local/bin/agent-runner", ReadOnly: true,
		}},
	}, nil, nil, name)
	if err != nil {
		t.Fatalf("container create: %v", err)
	}
	testutil.Cleanup(t, "remove proxy container", func() error {
		return testutil.Gone(cli.ContainerRemove(context.Background(), created.ID, container.RemoveOptions{Force: true}))
	})
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatalf("container start: %v", err)
	}
	waitFor(t, "proxy listening", func() bool {
		_, stderr := containerLogs(t, cli, created.ID)
		return strings.Contains(stderr, "proxy listening")
	})

	status, _, _ := execIn(t, cli, created.ID, nil, "cat", "/proc/1/status")
	if !strings.Contains(status, "Uid:\t65534\t65534\t65534\t65534") || !strings.Contains(status, "CapEff:\t0000000000000000") || !strings.Contains(status, "NoNewPrivs:\t1") {
		t.Errorf("proxy process is not unprivileged:\n%s", status)
	}
	if _, _, code := execIn(t, cli, created.ID, nil, "httpd", "-p", "127.0.0.1:8080", "-h", "/etc"); code != 0 {
		t.Fatal("could not start busybox httpd")
	}
	env := []string{"http_proxy=http://127.0.0.1:3128"}
	out, errOut, code := execIn(t, cli, created.ID, env, "wget", "-q", "-O-", "http://127.0.0.1:8080/passwd")
	if code != 0 || !strings.Contains(out, "nobody:x:65534") {
		t.Fatalf("allowed GET through the proxy: exit %d, %q %q", code, out, errOut)
	}
	_, errOut, code = execIn(t, cli, created.ID, env, "wget", "-q", "-O-", "http://127.0.0.1:8081/")
	if code == 0 || !strings.Contains(errOut, "403") {
		t.Fatalf("denied GET: exit %d, stderr %q, want a 403", code, errOut)
	}

	var recs []AuditRecord
	waitFor(t, "two audit lines", func() bool {
		stdout, _ := containerLogs(t, cli, created.ID)
		recs = nil
		for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
			var r AuditRecord
			if json.Unmarshal([]byte(l), &r) == nil && r.Decision != "" {
				recs = append(recs, r)
			}
		}
		return len(recs) >= 2
	})
	if recs[0].Port == 8081 { // lines are written when a request ends
		recs[0], recs[1] = recs[1], recs[0]
	}
	if recs[0].Decision != DecisionAllow || recs[0].Port != 8080 || recs[1].Decision != DecisionDeny || recs[1].Port != 8081 {
		t.Errorf("audit = %+v", recs)
	}

	// SIGTERM (docker stop) ends it cleanly, well inside the stop timeout.
	timeout := 10
	if err := cli.ContainerStop(ctx, created.ID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	insp, err := cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	if insp.State.ExitCode != 0 {
		t.Errorf("exit code after docker stop: %d, want 0", insp.State.ExitCode)
	}
}

func containerLogs(t *testing.T, cli *client.Client, id string) (string, string) {
	t.Helper()
	rc, err := cli.ContainerLogs(context.Background(), id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	var out, errb bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &errb, rc)
	return out.String(), errb.String()
}

func execIn(t *testing.T, cli *client.Client, id string, env []string, cmd ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: cmd, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec attach %v: %v", cmd, err)
	}
	defer att.Close()
	var out, errb bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &errb, att.Reader)
	insp, err := cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), insp.ExitCode
}
