// Checks on what an agent leaves on the host, shared by the agent
// acceptance tests.

package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkWorkspace(ws string) error {
	if err := checkFileMode(ws, 0o700|os.ModeDir); err != nil {
		return err
	}
	if err := checkFileMode(filepath.Join(ws, "skills"), 0o700|os.ModeDir); err != nil {
		return err
	}
	soul, err := os.ReadFile(filepath.Join(ws, "SOUL.md"))
	if err != nil || string(soul) != "You are a test agent." {
		return fmt.Errorf("SOUL.md: %q %v", soul, err)
	}
	mem, err := os.ReadFile(filepath.Join(ws, "MEMORY.md"))
	if err != nil || string(mem) != "Nothing yet." {
		return fmt.Errorf("MEMORY.md: %q %v", mem, err)
	}
	return nil
}

func checkFileMode(p string, want os.FileMode) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if got := st.Mode() & (os.ModeDir | os.ModePerm); got != want {
		return fmt.Errorf("%s: mode %v, want %v", p, got, want)
	}
	return nil
}
