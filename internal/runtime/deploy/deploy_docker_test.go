package deploy

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestOneRunnerPerAgent: replacements of one agent's runner, even racing
// each other, never leave two runner containers of the agent alive at once;
// the survivor is healthy; Remove leaves nothing.
func TestOneRunnerPerAgent(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	ctx := context.Background()
	id := "meepa-test-one-runner"
	state := t.TempDir()
	l := LayoutFor(state, id)
	ws := filepath.Join(state, "agents", id)
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(l); err != nil {
		t.Fatal(err)
	}
	cfg := agentspec.Config{
		AgentID: id, Workspace: ws, Listen: "unix://" + l.Socket, Token: "t",
		Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(64 << 20), TimeoutSeconds: 30, Network: "none", PidsLimit: 64},
		LLM:       agentspec.LLMConfig{Provider: "offline"},
	}
	if err := WriteConfig(l, &cfg); err != nil {
		t.Fatal(err)
	}
	d := Deployment{AgentID: id, Image: image, Layout: l, Listener: Listener{Unix: l.Socket}, Workspace: ws,
		User: "0:0", CapAdd: []string{"CHOWN", "DAC_READ_SEARCH"}, StopTimeout: 5 * time.Second, DockerSocket: DefaultDockerSocket}
	testutil.Cleanup(t, "remove runner "+id, func() error { return Remove(context.Background(), cli, id, time.Second) })

	// Count the agent's runner containers as often as the daemon answers.
	var maxSeen atomic.Int32
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
				filters.Arg("label", engine.LabelComponent+"="+ComponentRunner),
				filters.Arg("label", sandbox.LabelAgent+"="+id),
			)})
			if err == nil {
				running := int32(0)
				for _, c := range list {
					if c.State == "running" || c.State == "restarting" {
						running++
					}
				}
				if running > maxSeen.Load() {
					maxSeen.Store(running)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	if _, err := Deploy(ctx, cli, d); err != nil {
		t.Fatal(err)
	}
	// Two replacements race: one may lose on the container name, never
	// both win.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Deploy(ctx, cli, d)
		}()
	}
	wg.Wait()
	if errs[0] != nil && errs[1] != nil {
		t.Fatalf("both replacements failed: %v / %v", errs[0], errs[1])
	}
	st, err := Inspect(ctx, cli, id)
	if err != nil || st.State != "running" {
		t.Fatalf("after replacements: %+v %v", st, err)
	}
	h, err := WaitHealthy(ctx, cli, st.ID, d.Listener, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if h["agent_id"] != id {
		t.Fatalf("healthz %v", h)
	}
	close(stop)
	watch.Wait()
	if n := maxSeen.Load(); n != 1 {
		t.Fatalf("saw %d runner containers of the agent running at once", n)
	}

	if err := Remove(ctx, cli, id, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, _ := Inspect(ctx, cli, id); st.State != "missing" {
		t.Fatalf("after Remove: %+v", st)
	}
	if err := Remove(ctx, cli, id, time.Second); err != nil {
		t.Fatalf("Remove of a missing runner: %v", err)
	}
}
