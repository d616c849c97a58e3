package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunnerBinaryResolutionOrder(t *testing.T) {
	dir := t.TempDir()
	explicit := filepath.Join(dir, "explicit")
	fromEnv := filepath.Join(dir, "from-env")
	for _, p := range []string{explicit, fromEnv} {
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("MEEPA_AGENT_RUNNER", fromEnv)

	d := &providerData{runnerBinary: explicit}
	if got, err := d.RunnerBinary("amd64"); err != nil || got != explicit {
		t.Fatalf("runner_binary set: got %q, %v; want %q", got, err, explicit)
	}
	d.runnerBinary = ""
	if got, err := d.RunnerBinary("amd64"); err != nil || got != fromEnv {
		t.Fatalf("MEEPA_AGENT_RUNNER set: got %q, %v; want %q", got, err, fromEnv)
	}
	// A configured path that does not exist is an error naming it, never a
	// silent fall-through to some other binary.
	t.Setenv("MEEPA_AGENT_RUNNER", filepath.Join(dir, "missing"))
	_, err := d.RunnerBinary("amd64")
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing MEEPA_AGENT_RUNNER: got %v, want an error naming it", err)
	}
}

func TestRunnerBinaryBesideExecutable(t *testing.T) {
	t.Setenv("MEEPA_AGENT_RUNNER", "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := &providerData{}
	cands := d.runnerCandidates("arm64")
	want := []string{
		filepath.Join(filepath.Dir(exe), "agent-runner-linux-arm64"),
		filepath.Join(filepath.Dir(exe), "agent-runner"),
	}
	if strings.Join(cands, ",") != strings.Join(want, ",") {
		t.Fatalf("candidates %v, want %v", cands, want)
	}
}
