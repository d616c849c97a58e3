package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// runInContainer runs agent-run once in a container shaped like the
// per-message sandbox (read-only rootfs, /tmp a tmpfs, no capabilities, no
// network, nobody, the workspace bind-mounted at /workspace) and returns its
// Reply. It checks that the agent loop itself, SQLite included, lives with
// those constraints; the real sandbox spec is the runner's.
func runInContainer(t *testing.T, cli *client.Client, img, ws string, req agent.Request) agent.Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image:       img,
		Cmd:         []string{"agent-runner", "agent-run"},
		User:        "65534:65534",
		Env:         []string{"HOME=/workspace", "TMPDIR=/tmp"},
		WorkingDir:  "/workspace",
		OpenStdin:   true,
		StdinOnce:   true,
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Labels: engine.Labels("test", map[string]string{"test": t.Name()}),
	}, &container.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		NetworkMode:    "none",
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=256m"},
		Mounts:         []mount.Mount{{Type: mount.TypeBind, Source: ws, Target: "/workspace"}},
	}, nil, nil, fmt.Sprintf("meepa-test-agentrun-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove container", func() error {
		return testutil.Gone(cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}))
	})
	att, err := cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(att.Conn).Encode(req); err != nil {
		t.Fatal(err)
	}
	_ = att.CloseWrite()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case err := <-errC:
		t.Fatal(err)
	case w := <-waitC:
		if w.StatusCode != 0 {
			t.Fatalf("agent-run exited %d: %s", w.StatusCode, stderr.String())
		}
	}
	var rep agent.Reply
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not a Reply: %v: %q (stderr %q)", err, stdout.String(), stderr.String())
	}
	return rep
}

func TestAgentRunInHardenedContainer(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	img := testutil.EnsureRunnerImage(t, cli)
	ws, err := os.MkdirTemp("", "meepa-test-agentrun-ws-")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove "+ws, func() error { return os.RemoveAll(ws) })
	if err := os.Chown(ws, 65534, 65534); err != nil {
		t.Skipf("cannot hand the workspace to nobody: %v", err)
	}
	const key = "sk-container-secret-8080"
	req := agent.Request{
		Message:       agent.Message{ID: "m1", Text: "!sh id -u; pwd; echo x > /rootfs-write 2>&1 || echo rootfs-ro; echo note > n.txt; echo \"[$MEEPA_LLM_API_KEY]\"", ConversationID: "c"},
		LLM:           agentspec.LLMConfig{Provider: agentspec.ProviderOffline, APIKey: key},
		RedactSecrets: true,
	}
	rep := runInContainer(t, cli, img, ws, req)
	if rep.ErrorKind != "" {
		t.Fatalf("%s: %s", rep.ErrorKind, rep.Error)
	}
	if !strings.HasPrefix(rep.Reply, "exit 0\n65534\n/workspace\n") || !strings.Contains(rep.Reply, "rootfs-ro") || !strings.HasSuffix(rep.Reply, "[]\n") {
		t.Errorf("reply = %q", rep.Reply)
	}
	req.Message.ID, req.Message.Text = "m2", "!sh cat n.txt; ls"
	rep = runInContainer(t, cli, img, ws, req)
	if rep.Reply != "exit 0\nnote\nmemory.db\nn.txt\n" {
		t.Errorf("second reply = %q (%s)", rep.Reply, rep.Error)
	}
	mem, err := agent.OpenMemory(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mem.Close() }()
	h, err := mem.History(context.Background(), "c", 10)
	if err != nil || len(h) != 4 || h[2].Text != "!sh cat n.txt; ls" {
		t.Errorf("memory.db after two containers: %+v, %v", h, err)
	}
	st, _ := os.Stat(ws + "/" + agent.MemoryFile)
	if st == nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("memory.db is not nobody's: %v", st)
	}
}
