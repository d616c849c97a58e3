package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestTCPRunnerReachOnlyFromHost (issue 19, item 1): a runner on a TCP
// port listens on every address of its container. On Docker's default
// bridge any container of the host reached it there; now only the port
// published on the host's 127.0.0.1 does. And a flood of 400 connections
// each sending 0.9 MB of unterminated headers, without a token, used to
// OOM-kill the runner at its 256 MiB (here, through docker-proxy, it
// peaked at 140 MiB): it must stay small, unrestarted, and
// answer a real message afterwards.
func TestTCPRunnerReachOnlyFromHost(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	ctx := context.Background()
	id := "meepa-test-tcp-reach"
	state := t.TempDir()
	l := LayoutFor(state, id)
	ws := filepath.Join(state, "agents", id)
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(l); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	listener := Listener{Port: port}
	cfg := agentspec.Config{
		AgentID: id, Workspace: ws, Listen: ServedListen(agentspec.ModeContainer, listener), Token: "t",
		Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(64 << 20), TimeoutSeconds: 30, Network: "none", PidsLimit: 64},
		LLM:       agentspec.LLMConfig{Provider: "offline"},
	}
	if err := WriteConfig(l, &cfg); err != nil {
		t.Fatal(err)
	}
	d, err := ForConfig(cfg, Placement{Image: image, Layout: l, Listener: listener, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove runner "+id, func() error { return Remove(context.Background(), cli, id, time.Second) })
	cid, err := Deploy(ctx, cli, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WaitHealthy(ctx, cli, cid, listener, time.Minute); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, cid)
	if err != nil {
		t.Fatal(err)
	}
	for name, ep := range in.NetworkSettings.Networks {
		if ep.IPAddress == "" {
			continue
		}
		// A container on Docker's default bridge tries the runner's address.
		// (busybox's static wget crashes; nc speaks the request itself.)
		out, _ := runBusybox(t, cli, "bridge", fmt.Sprintf(`printf 'GET /healthz HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, ep.IPAddress, port))
		if strings.Contains(out, "HTTP/1.") {
			t.Errorf("a container on docker0 reached the runner at %s:%d (network %s): %s", ep.IPAddress, port, name, out)
		}
	}

	// The flood, from the host, at the published port.
	line := "X-Flood: " + strings.Repeat("a", 1000) + "\r\n"
	var wg sync.WaitGroup
	for range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", listener.String(), 5*time.Second)
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "POST /v1/messages HTTP/1.1\r\nHost: runner\r\n"); err != nil {
				return
			}
			for sent := 0; sent < 900<<10; sent += len(line) {
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if in, err = cli.ContainerInspect(ctx, cid); err != nil {
		t.Fatal(err)
	}
	if in.State.OOMKilled || in.RestartCount != 0 || !in.State.Running {
		t.Fatalf("after the flood: OOMKilled %v, restarts %d, running %v", in.State.OOMKilled, in.RestartCount, in.State.Running)
	}
	// What the flood cost the runner at its peak, where the cgroup says.
	if peak, ok := memoryPeak(cid); ok {
		t.Logf("runner memory peak: %d MiB", peak>>20)
		if peak > 48<<20 {
			t.Errorf("the runner's memory peaked at %d MiB under the flood; want it bounded (under 48 MiB of its 256)", peak>>20)
		}
	}
	// The flood's connections end as its clients close them, seen by the
	// runner a moment later through Docker's port proxy; until then the
	// cap may still answer 503. A real message must get through soon after.
	start := time.Now()
	for {
		req, _ := http.NewRequest(http.MethodPost, listener.Endpoint()+"/v1/messages", strings.NewReader(`{"text":"hello"}`))
		req.Header.Set("Authorization", "Bearer t")
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && time.Since(start) < 10*time.Second {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a real message %v after the flood: %d %s", time.Since(start).Round(time.Millisecond), resp.StatusCode, raw)
		}
		t.Logf("a real message answered %v after the flood", time.Since(start).Round(time.Millisecond))
		return
	}
}

// runBusybox runs sh -c cmd in a throwaway busybox container on network
// and returns its output and exit code.
func runBusybox(t *testing.T, cli *client.Client, network, cmd string) (string, int) {
	t.Helper()
	ctx := context.Background()
	img := testutil.EnsureBusybox(t, cli)
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"sh", "-c", cmd}},
		&container.HostConfig{NetworkMode: container.NetworkMode(network)}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) }()
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	wait, errc := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	var code int
	select {
	case w := <-wait:
		code = int(w.StatusCode)
	case err := <-errc:
		t.Fatal(err)
	}
	logs, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logs.Close() }()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, logs)
	return out.String(), code
}

// memoryPeak reads a container's peak memory from its cgroup (v1 or v2,
// cgroupfs or systemd driver).
func memoryPeak(id string) (int64, bool) {
	for _, p := range []string{
		"/sys/fs/cgroup/memory/docker/" + id + "/memory.max_usage_in_bytes",
		"/sys/fs/cgroup/memory/system.slice/docker-" + id + ".scope/memory.max_usage_in_bytes",
		"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/memory.peak",
		"/sys/fs/cgroup/docker/" + id + "/memory.peak",
	} {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var n int64
		if _, err := fmt.Sscan(string(raw), &n); err == nil {
			return n, true
		}
	}
	return 0, false
}
