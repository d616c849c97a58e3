package agent

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// applySeed writes a request's Seed into the workspace by the rules the
// provider applies on Docker (workspace.Ensure). The workspace is a mount
// point (a pod's /workspace): it keeps the mode its volume gave it
// (workspace.Spec.Mounted says why). It runs before the system prompt is
// read, so the message sees the soul it brought. Only whether SOUL.md was
// written is logged, never its content. Like every other write of the
// loop it holds no known secret value (Prepared.Scrub).
func applySeed(ctx context.Context, seed *Seed, dir string, red *scrubber, log hclog.Logger) error {
	if seed == nil {
		return nil
	}
	soul, err := red.String(ctx, seed.Soul)
	if err != nil {
		return fmt.Errorf("seed %s: %w", workspace.SoulFile, err)
	}
	memory, err := red.String(ctx, seed.Memory)
	if err != nil {
		return fmt.Errorf("seed %s: %w", workspace.MemoryFile, err)
	}
	r, err := workspace.Ensure(workspace.Spec{
		Dir: dir, Soul: soul, Memory: memory, ManageSoul: seed.ManageSoul, Mounted: true,
	})
	if err != nil {
		return err
	}
	if r.SoulWritten {
		log.Info("workspace seeded", "file", workspace.SoulFile)
	}
	return nil
}
