package runner

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// WriteConfig holds the API key and the token: the file must end up 0600
// whatever lay in the directory before, and never be written through a
// name someone else placed there.
func TestWriteConfigModeAndNoFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	elsewhere := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(elsewhere, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The name the old implementation used for its temporary file.
	if err := os.Symlink(elsewhere, path+".tmp"); err != nil {
		t.Fatal(err)
	}
	c := &agentspec.Config{AgentID: "a1", Token: "tok-123456", LLM: agentspec.LLMConfig{Provider: "offline", APIKey: "sk-abcdef"}}
	if err := agentspec.WriteConfig(path, c); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(elsewhere); string(raw) != "untouched" {
		t.Fatalf("WriteConfig wrote through a planted symlink: %q", raw)
	}
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("config: %v %v, want a regular 0600 file", st, err)
	}
	back, err := agentspec.LoadConfig(path)
	if err != nil || back.Token != c.Token || back.LLM.APIKey != c.LLM.APIKey || back.Path != path {
		t.Fatalf("LoadConfig: %+v %v", back, err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".config.json.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := agentspec.LoadConfig(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("LoadConfig of a 0640 config: %v, want a refusal", err)
	}
}

// Env ends up in the sandbox's inspect output: a secret value there is a
// config error, whichever variable carries it.
func TestValidateRefusesSecretInEnv(t *testing.T) {
	c := testConfig()
	c.Env = map[string]string{"http_proxy": "http://proxy:3128"}
	if err := kube.ValidateConfig(c); err != nil {
		t.Fatalf("plain env refused: %v", err)
	}
	c.Env = map[string]string{"HOME=/etc x": "y"}
	if err := kube.ValidateConfig(c); err == nil || !strings.Contains(err.Error(), "variable name") {
		t.Errorf("env key with '=': Validate = %v, want a refusal", err)
	}
	for _, v := range []string{"sk-very-secret", "Bearer ghp_alsosecret"} {
		c.Env = map[string]string{"http_proxy": "http://proxy:3128", "LEAK": v}
		err := kube.ValidateConfig(c)
		if err == nil || !strings.Contains(err.Error(), "env LEAK") || strings.Contains(err.Error(), v) {
			t.Errorf("env value %q: Validate = %v, want a refusal naming LEAK and not the value", v, err)
		}
	}
}

// A stale socket is replaced; a file that is not a socket is never
// removed to make room.
func TestListenReplacesOnlyASocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "r.sock")
	ln, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	// Closing a unix listener removes its file; leave a stale one behind.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	if ln, err = Listen("unix://" + sock); err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	_ = ln.Close()

	data := filepath.Join(dir, "data.json")
	if err := os.WriteFile(data, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix://" + data); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen on a regular file = %v, want a refusal", err)
	}
	if raw, err := os.ReadFile(data); err != nil || string(raw) != "keep" {
		t.Errorf("the file was touched: %q %v", raw, err)
	}
}

func TestConfigOutsideWorkspace(t *testing.T) {
	c := testConfig()
	c.Workspace = "/srv/a1"
	c.Path = "/srv/a1/runner.json"
	if err := kube.ValidateConfig(c); err == nil || !strings.Contains(err.Error(), "inside the workspace") {
		t.Errorf("config inside the workspace: %v", err)
	}
	c.Path = "/srv/a1-runner.json"
	if err := kube.ValidateConfig(c); err != nil {
		t.Errorf("config beside the workspace: %v", err)
	}
	// The journal holds message text: never where the agent writes.
	for j, want := range map[string]string{
		"/srv/a1/.journal": "overlap", "/srv": "overlap", "journal": "absolute", "/x/../srv/j": "absolute", "/srv/a1-journal": "",
	} {
		c.Journal = j
		if err := kube.ValidateConfig(c); (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("journal_dir %q: %v, want %q", j, err, want)
		}
	}
}

// A budget out of range, or below the one it contains, is refused by the
// same check the provider runs at plan.
func TestValidateLLMLimits(t *testing.T) {
	for _, tc := range []struct {
		limits agentspec.LLMLimits
		field  string
	}{
		{agentspec.LLMLimits{MaxTokensPerCall: -1}, "llm.max_tokens_per_call"},
		{agentspec.LLMLimits{MaxTokensPerCall: agentspec.MaxMaxTokensPerCall + 1}, "llm.max_tokens_per_call"},
		{agentspec.LLMLimits{MessageTokenBudget: -5}, "llm.message_token_budget"},
		{agentspec.LLMLimits{MessageTokenBudget: 100}, "llm.message_token_budget"}, // below the default per-call cap
		{agentspec.LLMLimits{AgentTokenBudget: 1000}, "llm.agent_token_budget"},    // below the default message budget
		{agentspec.LLMLimits{AgentBudgetWindowSeconds: 59}, "llm.agent_budget_window_seconds"},
	} {
		c := testConfig()
		c.LLMLimits = tc.limits
		err := agentspec.ValidateSettings(c)
		var fe *fault.FieldError
		if err == nil || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error on %s", tc.limits, err, tc.field)
		}
	}
	c := testConfig()
	c.LLMLimits = agentspec.LLMLimits{MaxTokensPerCall: 100, MessageTokenBudget: 100, AgentTokenBudget: 100, AgentBudgetWindowSeconds: 60}
	if err := agentspec.ValidateSettings(c); err != nil {
		t.Errorf("tight but coherent limits refused: %v", err)
	}
}
