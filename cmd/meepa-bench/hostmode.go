package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// benchHostMode measures the host-mode (Landlock) runner round trip over
// HTTP for the trivial offline message, interleaved round by round with
// containerSend (a container-mode runner's round trip for the same
// message), and returns both medians. settle runs after each round so the
// container runner is idle before the next. The host runner is the same
// runner.Server, with the host backend and a freshly built agent-runner as
// the per-message child.
func benchHostMode(ctx context.Context, dir string, rounds int, containerSend, settle func() error) (host, ctr time.Duration, err error) {
	if abi := landlock.DetectABI(); abi < landlock.MinFSABI {
		return 0, 0, fmt.Errorf("host mode: kernel Landlock ABI %d < %d", abi, landlock.MinFSABI)
	}
	bin := filepath.Join(dir, "agent-runner-host")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/agent-runner")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("go build agent-runner: %w\n%s", err, out)
	}
	ws := filepath.Join(dir, "host-workspace")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return 0, 0, err
	}
	cfg := &agentspec.Config{
		AgentID:    "meepa-bench-host",
		Workspace:  ws,
		Listen:     "unix://" + filepath.Join(dir, "host.sock"),
		Token:      "bench-host",
		Container:  agentspec.ContainerMode{TimeoutSeconds: 60},
		FileAccess: landlock.FileAccess{AllowNetwork: true},
		LLM:        agentspec.LLMConfig{Provider: "offline"},
	}
	r, err := serveRunner(ctx, cfg, func(_ context.Context, cfg *agentspec.Config, _ *relay.Relay, log hclog.Logger) (sandbox.Backend, string, error) {
		o := backends.HostOptions(cfg, log)
		o.RunnerBinary = bin
		h, err := sandbox.NewHost(o)
		return h, backends.ModeHost, err
	})
	if err != nil {
		return 0, 0, err
	}
	defer r.close()

	var hs, cs []time.Duration
	for i := 0; i <= rounds; i++ {
		th, err := timed(r.send)
		if err != nil {
			return 0, 0, fmt.Errorf("host mode: %w", err)
		}
		tc, err := timed(containerSend)
		if err != nil {
			return 0, 0, fmt.Errorf("container mode: %w", err)
		}
		if err := settle(); err != nil {
			return 0, 0, err
		}
		// As in the main rounds: let the used container's removal settle.
		time.Sleep(150 * time.Millisecond)
		if i == 0 {
			continue // warm-up
		}
		hs, cs = append(hs, th), append(cs, tc)
	}
	return median(hs), median(cs), nil
}
