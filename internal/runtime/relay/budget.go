package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// BudgetFileName is the agent budget's record in the journal directory
// (the one directory of the runner's state that a runner container keeps
// across restarts); the journal's loader leaves it alone.
const BudgetFileName = "llm-budget.json"

// Budget counts the tokens the agent's relayed calls used in the
// current window (LLMLimits.AgentBudgetWindowSeconds). With a path it is
// written there after every counted call, so a restarted runner goes on
// counting the same window instead of handing out a fresh budget; a window
// that ended while the runner was down starts again with the next call.
type Budget struct {
	mu   sync.Mutex
	path string // "": kept in memory only
	// now is time.Now but for tests.
	now func() time.Time
	rec budgetRecord
}

type budgetRecord struct {
	WindowStart time.Time `json:"window_start"`
	Tokens      int64     `json:"tokens"`
}

// OpenBudget reads the record in dir (none yet is a fresh window). A
// record that cannot be read is an error: starting from zero would hand a
// runaway a new budget.
func OpenBudget(dir string) (*Budget, error) {
	b := &Budget{now: time.Now}
	if dir == "" {
		return b, nil
	}
	b.path = filepath.Join(dir, BudgetFileName)
	raw, err := os.ReadFile(b.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return b, nil
	case err != nil:
		return nil, fmt.Errorf("llm budget: %w", err)
	}
	if err := json.Unmarshal(raw, &b.rec); err != nil || b.rec.Tokens < 0 {
		return nil, fmt.Errorf("llm budget %s: unreadable record (remove it to start a fresh window): %w", b.path, err)
	}
	return b, nil
}

// used is the window's count, after starting a new window if the last one
// is over.
func (b *Budget) used(window time.Duration) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(window)
	return b.rec.Tokens
}

func (b *Budget) roll(window time.Duration) {
	now := b.now()
	// A start in the future (a clock set back) is treated as over, so a
	// wrong clock can shorten a window but never stretch it forever.
	if b.rec.WindowStart.IsZero() || now.Sub(b.rec.WindowStart) >= window || now.Before(b.rec.WindowStart) {
		b.rec = budgetRecord{WindowStart: now}
	}
}

// add counts n tokens and writes the record; it returns the window's count.
func (b *Budget) add(n int64, window time.Duration) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll(window)
	b.rec.Tokens += max(n, 0)
	if b.path == "" {
		return b.rec.Tokens, nil
	}
	raw, _ := json.Marshal(b.rec) // a struct of a time and an int
	return b.rec.Tokens, writeFileAtomic(b.path, raw)
}

// writeFileAtomic replaces path by raw (mode 0600) through a new temporary
// file in the same directory, so a crash leaves the old record or the new.
// The temporary name starts with ".tmp-", which the journal's loader
// removes as a write cut short.
func writeFileAtomic(path string, raw []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("llm budget: %w", err)
	}
	_, werr := f.Write(raw)
	if err := errors.Join(werr, f.Close()); err != nil {
		return errors.Join(fmt.Errorf("llm budget: %w", err), os.Remove(f.Name()))
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return errors.Join(fmt.Errorf("llm budget: %w", err), os.Remove(f.Name()))
	}
	return nil
}
