package agent

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
)

// Prepared is the part of a message's work that needs no request: the
// workspace checked and opened as the tools' root, and memory.db open with
// its schema in place. agent-run prepares before it reads its request, so
// that a prestarted container has it done when the message comes.
//
// Nothing here reads what a message may change between prepare and run
// in a way that matters: the system prompt (SOUL.md, MEMORY.md, skills)
// is read when the message comes, and SQLite reads memory.db's current
// content at each query, so rows written by the message before this one
// are seen. Preparing holds no lock on memory.db while it waits.
type Prepared struct {
	workspace string
	tb        *Toolbox
	mem       *Memory
	red       *scrubber
	err       error
}

// Prepare checks and opens workspace; a failure is kept and reported, with
// ErrKindWorkspace, by the Run that uses it.
func Prepare(ctx context.Context, workspace string) *Prepared {
	p := &Prepared{workspace: workspace}
	if workspace == "" {
		p.err = errors.New("no workspace directory given")
		return p
	}
	if p.err = checkWorkspace(workspace); p.err != nil {
		return p
	}
	tb, err := NewToolbox(workspace, nil)
	if err != nil {
		p.err = err
		return p
	}
	mem, err := OpenMemory(ctx, tb.Dir())
	if err != nil {
		p.err = errors.Join(err, tb.Close())
		return p
	}
	p.tb, p.mem = tb, mem
	return p
}

// Scrub makes red the filter of everything the loop writes into the
// workspace: memory.db's rows (Memory.Append), the file tool's files
// (Toolbox.WriteFile) and the seed (applySeed). Those are the only ways
// the loop writes there; the shell's own writes are the tools' (see
// inject_secrets_env). Run calls it once the relay is reachable, before
// the first write.
func (p *Prepared) Scrub(red *scrubber) {
	p.red = red
	if p.tb != nil {
		p.tb.red = red
	}
	if p.mem != nil {
		p.mem.red = red
	}
}

// Close releases the workspace root and memory.db; nil and repeated calls
// are fine.
func (p *Prepared) Close(log hclog.Logger) {
	if p == nil {
		return
	}
	if p.mem != nil {
		if err := p.mem.Close(); err != nil && log != nil {
			log.Warn("close memory.db", "error", err)
		}
		p.mem = nil
	}
	if p.tb != nil {
		_ = p.tb.Close() // a read-only root handle
		p.tb = nil
	}
}
