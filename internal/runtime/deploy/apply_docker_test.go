package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func benchAgent(id, image string) agentspec.Agent {
	return agentspec.Agent{
		Config: agentspec.Config{
			AgentID: id,
			Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(64 << 20), TimeoutSeconds: 30, Network: "none",
				PidsLimit: 64, Runtime: agentspec.DefaultRuntime},
			LLM:      agentspec.LLMConfig{Provider: "offline"},
			MaxSteps: agentspec.DefaultMaxSteps,
		},
		Meta: agentspec.Meta{Soul: "test", Deployment: agentspec.ModeContainer},
	}
}

func testService(t testing.TB, cli client.APIClient) *Service {
	return NewService(Options{StateDir: t.TempDir(), Version: "test",
		Docker: func(context.Context) (client.APIClient, error) { return cli, nil }, HealthTimeout: time.Minute})
}

// A new agent whose runner name is held by a container an earlier run left
// (it crashed before its state was saved) gets its runner all the same: the
// leftover is removed and replaced.
func TestFreshApplyReplacesALeftoverRunner(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	ctx := context.Background()
	id := fmt.Sprintf("meepa-test-leftover-%d", os.Getpid())
	testutil.Cleanup(t, "remove runner "+id, func() error { return Remove(context.Background(), cli, id, time.Second) })
	left, err := cli.ContainerCreate(ctx, &container.Config{Image: testutil.EnsureBusybox(t, cli), Cmd: []string{"sleep", "600"}},
		&container.HostConfig{NetworkMode: "none"}, &network.NetworkingConfig{}, nil, ContainerName(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, left.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := testService(t, cli)
	out, err := svc.Apply(ctx, benchAgent(id, image), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := Inspect(ctx, cli, id)
	if err != nil || st.State != agentspec.StatusRunning || st.ID != out.RunnerContainerID || st.ID == left.ID {
		t.Fatalf("runner after Apply over a leftover: %+v, %v (leftover %s, applied %s)", st, err, left.ID, out.RunnerContainerID)
	}
}

// BenchmarkNewAgentApply times a new container-mode agent's Apply+Remove
// beside `docker run -d` + `docker rm -f` of the same image in the same
// iteration; apply/run is the ratio of their medians.
func BenchmarkNewAgentApply(b *testing.B) {
	testutil.RequireDocker(b)
	cli := testutil.Docker(b)
	image := testutil.EnsureRunnerImage(b, cli)
	ctx := context.Background()
	svc := testService(b, cli)
	var applies, runs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("meepa-bench-apply-%d-%d", os.Getpid(), i)
		a := benchAgent(id, image)
		start := time.Now()
		if _, err := svc.Apply(ctx, a, nil, true); err != nil {
			b.Fatal(err)
		}
		if err := svc.Remove(ctx, a); err != nil {
			b.Fatal(err)
		}
		applies = append(applies, time.Since(start))

		name := "meepa-bench-run-" + id
		start = time.Now()
		if out, err := exec.Command("docker", "run", "-d", "--name", name, "--network", "none", "--entrypoint", "sleep", image, "600").CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
		if out, err := exec.Command("docker", "rm", "-f", name).CombinedOutput(); err != nil {
			b.Fatalf("docker rm: %v: %s", err, out)
		}
		runs = append(runs, time.Since(start))
	}
	b.StopTimer()
	ma, mr := medianOf(applies), medianOf(runs)
	b.ReportMetric(float64(ma.Microseconds())/1000, "apply+remove-ms")
	b.ReportMetric(float64(mr.Microseconds())/1000, "run+rm-ms")
	b.ReportMetric(float64(ma)/float64(mr), "apply/run")
}

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
