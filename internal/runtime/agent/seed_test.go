package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// A request's seed reaches the workspace before the system prompt is read,
// by workspace.Ensure's rules: written when missing, an agent's edit kept
// unless the soul is managed, MEMORY.md never rewritten; the mount point
// keeps its mode. Without a seed nothing is written.
func TestRunAppliesSeed(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o770|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	c := &scripted{next: func(int, Completion) (Answer, error) { return Answer{Text: "ok"}, nil }}
	run := func(seed *agentspec.Seed) string {
		t.Helper()
		req := offlineReq("hi")
		req.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m"}
		req.Seed = seed
		if rep := Run(ctx, &req, Options{Workspace: ws, Client: c}); rep.ErrorKind != "" {
			t.Fatalf("run: %+v", rep)
		}
		return c.calls[len(c.calls)-1].System
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	run(nil)
	if _, err := os.Lstat(filepath.Join(ws, "SOUL.md")); err == nil {
		t.Fatal("SOUL.md written without a seed")
	}
	sys := run(&agentspec.Seed{Soul: "soul v1", Memory: "mem v1"})
	if !strings.Contains(sys, "soul v1") || !strings.Contains(sys, "mem v1") {
		t.Errorf("the seeded message's system prompt misses the seed:\n%s", sys)
	}
	if st, err := os.Stat(filepath.Join(ws, "skills")); err != nil || !st.IsDir() {
		t.Errorf("skills/: %v", err)
	}
	if st, _ := os.Stat(ws); st.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
		t.Errorf("workspace mode %v: the mount point's mode was changed", st.Mode())
	}

	if err := os.WriteFile(filepath.Join(ws, "SOUL.md"), []byte("agent edit"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(&agentspec.Seed{Soul: "soul v2", Memory: "mem v2"})
	if got := read("SOUL.md"); got != "agent edit" {
		t.Errorf("unmanaged soul: SOUL.md = %q, want the agent's edit", got)
	}
	sys = run(&agentspec.Seed{Soul: "soul v2", Memory: "mem v2", ManageSoul: true})
	if got := read("SOUL.md"); got != "soul v2" || !strings.Contains(sys, "soul v2") {
		t.Errorf("managed soul: SOUL.md = %q; prompt:\n%s", got, sys)
	}
	if got := read("MEMORY.md"); got != "mem v1" {
		t.Errorf("MEMORY.md = %q, want the first seed's (never rewritten)", got)
	}
}

// A seed that cannot be applied fails the message as a workspace error.
func TestRunSeedFailureIsWorkspaceError(t *testing.T) {
	ws := t.TempDir()
	// A directory where SOUL.md should be: not missing, not a file.
	if err := os.Mkdir(filepath.Join(ws, "SOUL.md"), 0o700); err != nil {
		t.Fatal(err)
	}
	req := offlineReq("hi")
	req.Seed = &agentspec.Seed{Soul: "s", ManageSoul: true}
	rep := Run(context.Background(), &req, Options{Workspace: ws})
	if rep.ErrorKind != ErrKindWorkspace {
		t.Fatalf("want a workspace error, got %+v", rep)
	}
}

// The seed travels in the request as the runner writes it.
func TestSeedJSON(t *testing.T) {
	var req Request
	if err := json.Unmarshal([]byte(`{"seed":{"soul":"s","memory":"m","manage_soul":true}}`), &req); err != nil {
		t.Fatal(err)
	}
	if req.Seed == nil || *req.Seed != (agentspec.Seed{Soul: "s", Memory: "m", ManageSoul: true}) {
		t.Fatalf("seed %+v", req.Seed)
	}
	raw, _ := json.Marshal(Request{})
	if strings.Contains(string(raw), "seed") {
		t.Errorf("a request without a seed says %s", raw)
	}
}
