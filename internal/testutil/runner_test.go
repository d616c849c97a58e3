package testutil

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunnerBuildsAreShared: two builds of the same code leave one copy,
// and a copy unused for more than a day goes.
func TestRunnerBuildsAreShared(t *testing.T) {
	cache := t.TempDir()
	stale := filepath.Join(cache, "0000000000000000")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	a, err := buildRunner(cache)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildRunner(cache)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cache)
	if a != b || len(entries) != 1 {
		t.Fatalf("two builds gave %s and %s; the cache holds %d entries, want 1", a, b, len(entries))
	}
	if st, err := os.Stat(a); err != nil || st.Mode().Perm()&0o005 != 0o005 {
		t.Fatalf("the binary must be readable and runnable by other users (host mode): %v %v", st.Mode(), err)
	}
}
