package runner

import (
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// keyFromPieces is a shell command that builds testAPIKey at run time and
// prints it in the spellings a tool would use, so that the key as written
// is in nothing the model (or the test) sends.
const keyFromPieces = `k="$(printf '%s%s%s' sk-meepa- test-4f1c 9e2a77)"
printf 'plain %s\n' "$k"
printf 'b64 %s\n' "$(printf '%s' "$k" | base64 -w0)"
printf 'hex %s\n' "$(printf '%s' "$k" | od -An -tx1 | tr -d ' \n')"
printf 'rev %s\n' "$(printf '%s' "$k" | rev)"`

// noKeySpelling fails when text holds testAPIKey in any spelling the
// Redactor knows.
func noKeySpelling(t *testing.T, where, text string) {
	t.Helper()
	clean := redact.NewRedactor(testAPIKey).String(text)
	if clean == text {
		return
	}
	i := 0
	for i < len(clean) && clean[i] == text[i] {
		i++
	}
	t.Errorf("%s holds the API key at byte %d: %q", where, i, text[i:min(len(text), i+80)])
}

// workspaceHoldsNoKey reads every file of ws, memory.db included.
func workspaceHoldsNoKey(t *testing.T, ws string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(ws, agent.MemoryFile)); err != nil {
		t.Fatalf("no memory.db in the workspace: %v", err)
	}
	testutil.Must(t, filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		noKeySpelling(t, "workspace file "+p, string(data))
		return nil
	}))
}

// TestKeyNeverInWorkspace: the loop never holds the agent's llm.api_key,
// yet what it writes into the workspace holds the key in none of the
// Redactor's spellings, on Docker's container mode: a tool's output that
// carries the key (built from pieces inside the sandbox) and comes back as
// the reply, and a message text that carries it, are stored in memory.db
// scrubbed by the relay; the reply is redacted as before.
func TestKeyNeverInWorkspace(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	b64 := base64.StdEncoding.EncodeToString([]byte(testAPIKey))

	t.Run("offline", func(t *testing.T) {
		// The offline responder's reply is the tool's output itself.
		cfg := testAgentConfig(t, cli, "keyscrub-off")
		a := startAgent(t, cfg)
		ans := a.send(t, "!sh "+keyFromPieces)
		if ans.status != 200 || !strings.Contains(ans.reply, "plain "+redact.Redacted) {
			t.Fatalf("reply: %d %s", ans.status, ans.raw)
		}
		noKeySpelling(t, "the reply", string(ans.raw))
		if ans := a.send(t, "remember this: "+b64); ans.status != 200 {
			t.Fatalf("message with the key: %d %s", ans.status, ans.raw)
		}
		workspaceHoldsNoKey(t, cfg.Workspace)
		rows := readMemoryRows(t, cfg.Workspace)
		if strings.Count(rows, redact.Redacted) < 5 {
			t.Errorf("memory.db does not hold the scrubbed exchanges: %q", rows)
		}
	})
	t.Run("openai through the relay", func(t *testing.T) {
		model := testutil.NewFakeModel(t, map[string]string{"key": keyFromPieces})
		model.EchoTools = true
		cfg := testAgentConfig(t, cli, "keyscrub-oai")
		cfg.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.URL() + "/v1", APIKey: testAPIKey}
		a := startAgent(t, cfg)
		ans := a.send(t, "key")
		if ans.status != 200 || !strings.Contains(ans.reply, "plain "+redact.Redacted) {
			t.Fatalf("reply: %d %s", ans.status, ans.raw)
		}
		noKeySpelling(t, "the reply", string(ans.raw))
		if ans := a.send(t, "remember this: "+b64); ans.status != 200 {
			t.Fatalf("message with the key: %d %s", ans.status, ans.raw)
		}
		workspaceHoldsNoKey(t, cfg.Workspace)
	})
}

// readMemoryRows is every text memory.db holds, read with the loop's
// own SQLite driver.
func readMemoryRows(t *testing.T, ws string) string {
	t.Helper()
	m, err := agent.OpenMemory(t.Context(), ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Close() }()
	h, err := m.History(t.Context(), agent.DefaultConversation, 100)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range h {
		b.WriteString(c.Text + "\n")
	}
	return b.String()
}
