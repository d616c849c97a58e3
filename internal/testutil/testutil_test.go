package testutil

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

func TestRunnerImageRunsVersion(t *testing.T) {
	RequireDocker(t)
	cli := Docker(t)
	img := EnsureRunnerImage(t, cli)
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"agent-runner", "version"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := Gone(cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})); err != nil {
			t.Errorf("remove container: %v", err)
		}
	}()
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case err := <-errC:
		t.Fatal(err)
	case <-waitC:
	}
	logs, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "agent-runner ") {
		t.Fatalf("agent-runner version printed %q", out.String())
	}
}
