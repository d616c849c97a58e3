package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// runToken keeps names apart when several checkouts run these tests on one
// daemon at once: a backend removes every container of its agent id that it
// did not make.
var runToken = func() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

func uniq(name string) string { return name + "-" + runToken }

func newBackend(t *testing.T, cli *client.Client, cmd []string, prestart bool) (*Docker, Spec) {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(ws+"/SOUL.md", []byte("root-owned file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{
		AgentID:   uniq("tf-acc-sbx-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))),
		Workspace: ws,
		Image:     testutil.EnsureBusybox(t, cli),
		Command:   cmd,
	}
	d, err := NewDocker(context.Background(), cli, DockerOptions{Spec: spec, Prestart: prestart, ChownWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "close backend and remove its containers", func() error {
		cerr := d.Close(context.Background())
		_, rerr := RemoveOrphans(context.Background(), cli, spec.AgentID)
		return errors.Join(cerr, rerr)
	})
	return d, spec
}

func agentContainers(t *testing.T, cli *client.Client, agentID string) []container.Summary {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: OrphanFilter(agentID)})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// A prestarted container, inspected while it waits for its message, must
// show the daemon applied every hardening setting; then it answers, is
// removed, and the workspace is writable for the non-root user.
func TestDockerPrestartedContainerIsHardened(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	// The command echoes its input and proves it is not root and can write.
	d, spec := newBackend(t, cli, []string{"sh", "-c", "id -u > /workspace/uid && echo ok >> /workspace/SOUL.md && cat"}, true)
	ctx := context.Background()

	deadline := time.Now().Add(60 * time.Second)
	for !d.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("prestarted container never became ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	list := agentContainers(t, cli, spec.AgentID)
	if len(list) != 1 || list[0].State != "running" {
		t.Fatalf("want one running prestarted container, got %+v", list)
	}
	ins, err := cli.ContainerInspect(ctx, list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's view: the config it stored, and the mounts it made.
	checkCIS(t, ins.Config, ins.HostConfig, ins.HostConfig.Mounts, spec.Workspace)
	if len(ins.Mounts) != 1 || ins.Mounts[0].Source != spec.Workspace || ins.Mounts[0].Destination != WorkspaceDir || !ins.Mounts[0].RW {
		t.Errorf("mount points %+v, want only the workspace at /workspace", ins.Mounts)
	}
	if ins.AppArmorProfile == "unconfined" {
		t.Error("AppArmor unconfined")
	}
	if ins.State.Pid == 0 || ins.HostConfig.NetworkMode != "none" {
		t.Errorf("state pid %d network %q", ins.State.Pid, ins.HostConfig.NetworkMode)
	}

	out, err := d.Run(ctx, Job{MessageID: "m-1", Stdin: []byte(`{"hello":1}`), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out.SandboxID != list[0].ID {
		t.Errorf("message ran in %s, not the prestarted %s", out.SandboxID, list[0].ID)
	}
	if string(out.Stdout) != `{"hello":1}` || out.ExitCode != 0 || out.OOMKilled || out.TimedOut || out.ImageID == "" {
		t.Fatalf("outcome %+v stdout %q", out, out.Stdout)
	}
	uid, _ := os.ReadFile(spec.Workspace + "/uid")
	if strings.TrimSpace(string(uid)) != fmt.Sprint(agentspec.AgentUID(spec.AgentID)) {
		t.Errorf("ran as uid %q, want the agent's own %d", uid, agentspec.AgentUID(spec.AgentID))
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := agentContainers(t, cli, spec.AgentID); len(left) != 0 {
		t.Errorf("containers left after Close: %+v", left)
	}
}

// A container that outlives the timeout is killed, reported as timed out,
// and removed; a cold (not prestarted) backend reports its start latency.
func TestDockerTimeoutKillsAndRemoves(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	d, spec := newBackend(t, cli, []string{"sh", "-c", "cat >/dev/null; sleep 120"}, false)
	ctx := context.Background()
	out, err := d.Run(ctx, Job{MessageID: "m-slow", Stdin: []byte("x"), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !out.TimedOut || out.ExitCode != 137 || out.StartLatency <= 0 {
		t.Fatalf("outcome %+v: want timed out, killed (137), with a start latency", out)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := agentContainers(t, cli, spec.AgentID); len(left) != 0 {
		t.Errorf("timed-out container not removed: %+v", left)
	}
}

// Orphans (containers of this agent left by a crashed runner) are removed
// when a backend starts; other agents' containers are left alone.
func TestDockerRemovesOrphansAtStart(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	ws := t.TempDir()
	mk := func(agent string) string {
		cfg, hc, nc, err := HardenedSpec(Spec{AgentID: agent, Workspace: ws, Image: testutil.EnsureBusybox(t, cli), Command: []string{"sleep", "300"}}, "m-orphan")
		if err != nil {
			t.Fatal(err)
		}
		c, err := cli.ContainerCreate(ctx, cfg, hc, nc, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
		return c.ID
	}
	agentA, agentB := uniq("tf-acc-orphan-a"), uniq("tf-acc-orphan-b")
	mk(agentA)
	other := mk(agentB)
	testutil.Cleanup(t, "remove container", func() error {
		return testutil.Gone(cli.ContainerRemove(ctx, other, container.RemoveOptions{Force: true}))
	})

	d, err := NewDocker(ctx, cli, DockerOptions{Spec: Spec{AgentID: agentA, Workspace: ws, Image: testutil.BusyboxImage}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	if left := agentContainers(t, cli, agentA); len(left) != 0 {
		t.Errorf("orphan left: %+v", left)
	}
	if left := agentContainers(t, cli, agentB); len(left) != 1 {
		t.Errorf("another agent's container was touched: %+v", left)
	}
}

// A prestarted container that died while it waited (killed out of band) is
// not handed a message; a fresh one answers instead.
func TestDockerDeadPrestartedContainerIsReplaced(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	d, spec := newBackend(t, cli, []string{"cat"}, true)
	ctx := context.Background()
	for deadline := time.Now().Add(60 * time.Second); !d.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("prestarted container never became ready")
		}
	}
	list := agentContainers(t, cli, spec.AgentID)
	if len(list) != 1 {
		t.Fatalf("want one prestarted container, got %+v", list)
	}
	if err := cli.ContainerKill(ctx, list[0].ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	// The backend learns of the death from the end of the container's
	// output stream, which the daemon closes as the kill completes.
	for deadline := time.Now().Add(10 * time.Second); d.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the backend still reports the killed container ready")
		}
	}
	out, err := d.Run(ctx, Job{MessageID: "m-2", Stdin: []byte("still here"), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out.SandboxID == list[0].ID || string(out.Stdout) != "still here" || out.ExitCode != 0 {
		t.Fatalf("outcome %+v stdout %q: want a fresh container's answer", out, out.Stdout)
	}
}

// Named networks: the first is joined at create, the rest before start, so
// the agent sees all of them from its first instruction.
func TestDockerNamedNetworks(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	var names []string
	for _, n := range []string{uniq("tf-acc-sbx-net-a"), uniq("tf-acc-sbx-net-b")} {
		testutil.Must(t, testutil.Gone(cli.NetworkRemove(ctx, n))) // a leftover of a crashed run
		if _, err := cli.NetworkCreate(ctx, n, network.CreateOptions{Internal: true, Labels: engine.Labels("test-network", nil)}); err != nil {
			t.Fatal(err)
		}
		testutil.Cleanup(t, "remove network "+n, func() error { return testutil.Gone(cli.NetworkRemove(context.Background(), n)) })
		names = append(names, n)
	}
	ws := t.TempDir()
	spec := Spec{AgentID: uniq("tf-acc-sbx-nets"), Workspace: ws, Image: testutil.EnsureBusybox(t, cli), Networks: names,
		Command: []string{"sh", "-c", "cat >/dev/null; ls /sys/class/net | tr '\\n' ' '"}}
	d, err := NewDocker(ctx, cli, DockerOptions{Spec: spec, ChownWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	out, err := d.Run(ctx, Job{MessageID: "m", Stdin: []byte("x"), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out.Stdout)); got != "eth0 eth1 lo" {
		t.Errorf("interfaces %q, want eth0 eth1 lo", got)
	}
}

// With Final, a reply that says it is final is answered at once, before the
// container exits; the next message still reaches its container only after
// the previous one has exited. The command notes in the workspace when it
// read its message and when it ended: the notes never interleave.
func TestDockerFinalReplyAnswersBeforeExit(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	ws := t.TempDir()
	// The sleep before the reply outlasts refillHeadStart, so the next
	// container is started while this one still runs.
	cmd := []string{"sh", "-c", "cat >/dev/null; sleep 0.5; echo start >> /workspace/order; echo done; sleep 3; echo end >> /workspace/order"}
	spec := Spec{AgentID: uniq("tf-acc-sbx-final"), Workspace: ws, Image: testutil.EnsureBusybox(t, cli), Command: cmd}
	final := func(b []byte) bool { return string(b) == "done\n" }
	d, err := NewDocker(ctx, cli, DockerOptions{Spec: spec, Prestart: true, ChownWorkspace: true, Final: final})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "close backend and remove its containers", func() error {
		cerr := d.Close(context.Background())
		_, rerr := RemoveOrphans(context.Background(), cli, spec.AgentID)
		return errors.Join(cerr, rerr)
	})
	order := func() string {
		b, err := os.ReadFile(filepath.Join(ws, "order"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	out, err := d.Run(ctx, Job{MessageID: "m-1", Stdin: []byte("one"), Timeout: 60 * time.Second})
	if err != nil || string(out.Stdout) != "done\n" || out.ImageID == "" {
		t.Fatalf("first message: %+v %v", out, err)
	}
	if got := order(); got != "start\n" {
		t.Fatalf("after the first answer the workspace says %q: the answer waited for the exit", got)
	}
	out2, err := d.Run(ctx, Job{MessageID: "m-2", Stdin: []byte("two"), Timeout: 60 * time.Second})
	if err != nil || string(out2.Stdout) != "done\n" || out2.SandboxID == out.SandboxID {
		t.Fatalf("second message: %+v %v", out2, err)
	}
	if got := order(); got != "start\nend\nstart\n" {
		t.Fatalf("the workspace says %q: the second message ran beside the first container", got)
	}
}
