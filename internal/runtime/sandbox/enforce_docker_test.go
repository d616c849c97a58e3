package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestDockerEnforcementFailsClosed: while the enforcement check fails, no
// container starts (the prestart is refused too) and a container prestarted
// while it passed is discarded instead of getting the message (its command
// would keep whatever it read in the workspace); once it passes again,
// messages run.
func TestDockerEnforcementFailsClosed(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	var enforced atomic.Bool
	enforced.Store(true)
	var asked atomic.Int64
	check := func(context.Context) error {
		asked.Add(1)
		if !enforced.Load() {
			return fmt.Errorf("%w: rules gone", ErrNotEnforced)
		}
		return nil
	}
	ws := t.TempDir()
	spec := Spec{AgentID: uniq("tf-acc-sbx-enforce"), Workspace: ws, Image: testutil.EnsureBusybox(t, cli), Command: []string{"sh", "-c", "tee -a /workspace/got"}}
	d, err := NewDocker(ctx, cli, DockerOptions{Spec: spec, Prestart: true, ChownWorkspace: true, Enforcement: check})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if _, err := RemoveOrphans(context.Background(), cli, spec.AgentID); err != nil {
			t.Error(err)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); !d.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("prestarted container never became ready")
		}
	}
	prestarted := agentContainers(t, cli, spec.AgentID)
	if len(prestarted) != 1 {
		t.Fatalf("want one prestarted container, got %d", len(prestarted))
	}

	enforced.Store(false)
	before := asked.Load()
	out, err := d.Run(ctx, Job{MessageID: "m-refused", Stdin: []byte("secret message"), Timeout: 30 * time.Second})
	if !errors.Is(err, ErrNotEnforced) || out.SandboxID != "" || len(out.Stdout) != 0 {
		t.Fatalf("Run with enforcement failing: %+v %v, want ErrNotEnforced and no sandbox", out, err)
	}
	if asked.Load() == before {
		t.Fatal("the check was not asked")
	}
	// tee makes the file when it starts; what matters is what is in it.
	if got, err := os.ReadFile(filepath.Join(ws, "got")); (err != nil && !errors.Is(err, os.ErrNotExist)) || len(got) != 0 {
		t.Fatalf("a container read the refused message: %q %v", got, err)
	}
	// The prestarted container is gone, and no other started meanwhile.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left := agentContainers(t, cli, spec.AgentID)
		running := 0
		for _, c := range left {
			if c.State == "running" {
				running++
			}
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers still running after a refusal: %+v", left)
		}
	}

	enforced.Store(true)
	out, err = d.Run(ctx, Job{MessageID: "m-ok", Stdin: []byte("back"), Timeout: 30 * time.Second})
	if err != nil || string(out.Stdout) != "back" || out.SandboxID == prestarted[0].ID {
		t.Fatalf("after enforcement is back: %+v %v", out, err)
	}
	// The same command did keep what it read: the check above can fail.
	if got, err := os.ReadFile(filepath.Join(ws, "got")); err != nil || string(got) != "back" {
		t.Fatalf("workspace after a message: %q %v", got, err)
	}
}
