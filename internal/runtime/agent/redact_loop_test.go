package agent

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// printForms is a shell command that prints each of the tool environment's
// secrets in the spellings a hostile model would ask for, one per line,
// with the coreutils every image has.
const printForms = `for v in "$MEEPA_LLM_API_KEY" "$DB_PASSWORD"; do
  printf '%s\n' "$v"
  printf '%s' "$v" | tr a-z A-Z; echo
  printf '%s' "$v" | rev; echo
  printf '%s' "$v" | base64 -w0; echo
  printf '%s' "$v" | base64 -w0 | tr '+/' '-_' | tr -d =; echo
  printf 'xy%s{"more":1}' "$v" | base64 -w0; echo
  printf '%s' "$v" | base32 -w0; echo
  printf '%s' "$v" | od -An -tx1 | tr -d ' \n'; echo
  printf '%s' "$v" | od -An -tx1 | tr -d ' \n' | tr a-f A-F; echo
  printf '%s' "$v" | sed 's/./& /g'; echo
  printf '%s' "$v" | od -An -tx1 | tr -d '\n' | sed 's/ /\\u00/g'; echo
  printf '%s' "$v" | od -An -tx1 | tr -d '\n' | sed 's/ /%/g'; echo
  printf '%s' "$v" | cut -c1-9; printf '%s' "$v" | cut -c10-
done`

const (
	loopKey    = "sk-proj-Abc123XyZ789qwe"
	loopSecret = "hunter2-db-pass"
)

// assertNoSpelling fails when text holds a value in any spelling the
// Redactor promises to catch, the embedded base64 of printForms included.
func assertNoSpelling(t *testing.T, where, text string) {
	t.Helper()
	for _, v := range []string{loopKey, loopSecret} {
		for name, form := range testutil.Spellings(v) {
			if strings.Contains(text, form) {
				t.Errorf("%s holds the %s spelling of %q", where, name, v)
			}
		}
		blob := base64.StdEncoding.EncodeToString([]byte("xy" + v + `{"more":1}`))
		if inner := testutil.InnerBase64(blob, 2, len(v)); strings.Contains(text, inner) {
			t.Errorf("%s holds %q base64-encoded inside a blob", where, v)
		}
	}
}

// TestLoopRedactsEncodedSecrets: a tool that has the key (asked for with
// inject_credentials_env; no other secret reaches a sandbox) prints it
// encoded; the reply, what the model is sent, and memory.db hold none of
// the spellings, and memory.db holds none whatever redact_secrets says.
func TestLoopRedactsEncodedSecrets(t *testing.T) {
	for _, on := range []bool{true, false} {
		ws := t.TempDir()
		req := offlineReq("!sh " + printForms)
		req.LLM.APIKey = loopKey
		req.InjectCredentialsEnv, req.RedactSecrets = true, on
		rep := runReq(t, ws, req)
		if rep.ErrorKind != "" {
			t.Fatalf("reply failed: %s %s", rep.ErrorKind, rep.Error)
		}
		if on {
			all, _ := json.Marshal(rep)
			assertNoSpelling(t, "the reply", string(all))
			// Every line the loop printed of the key went: 13.
			if n := strings.Count(rep.Reply, redact.Redacted); n < 13 {
				t.Errorf("%d redactions, want 13 at least:\n%s", n, rep.Reply)
			}
		} else if !strings.Contains(rep.Reply, loopKey) {
			t.Fatalf("without redact_secrets the reply should show what the tool printed: %q", rep.Reply)
		}
		rows := memoryRows(t, ws)
		if !strings.Contains(rows, "exit 0") {
			t.Fatalf("memory.db does not hold the reply: %q", rows)
		}
		assertNoSpelling(t, "memory.db's rows", rows)
		raw, err := os.ReadFile(filepath.Join(ws, MemoryFile))
		if err != nil {
			t.Fatal(err)
		}
		assertNoSpelling(t, "memory.db's file", string(raw))
	}
}

// memoryRows is every text memory.db holds, read with the same SQLite
// driver the loop writes it with.
func memoryRows(t *testing.T, ws string) string {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(ws, MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	rs, err := db.Query("SELECT conversation_id, message_id, role, text FROM messages")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rs.Close() }() // rs.Err below reports what matters
	var all strings.Builder
	for rs.Next() {
		var c, m, r, text string
		if err := rs.Scan(&c, &m, &r, &text); err != nil {
			t.Fatal(err)
		}
		all.WriteString(c + " " + m + " " + r + " " + text + "\n")
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return all.String()
}

// TestWorkspaceWritesHoldNoSecret: a file the model has the file tool
// write, and a seed, carry a secret base64-encoded and spelled out; what
// lands in the workspace holds neither.
func TestWorkspaceWritesHoldNoSecret(t *testing.T) {
	ws := t.TempDir()
	content := "token: " + base64.StdEncoding.EncodeToString([]byte(loopKey)) + "\npass: " + strings.Join(strings.Split(loopKey, ""), " ") + "\n"
	input, _ := json.Marshal(map[string]string{"path": "notes/creds.txt", "content": content})
	c := &scripted{next: func(n int, _ Completion) (Answer, error) {
		if n == 1 {
			return Answer{ToolCalls: []ToolUse{{ID: "w1", Name: ToolWriteFile, Input: input}}}, nil
		}
		return Answer{Text: "done"}, nil
	}}
	req := offlineReq("write it")
	req.LLM.APIKey = loopKey
	req.Seed = &agentspec.Seed{Soul: "You know " + loopKey, Memory: "hex " + strings.ToUpper(hex.EncodeToString([]byte(loopKey)))}
	rep := Run(context.Background(), &req, Options{Workspace: ws, Client: c})
	if rep.ErrorKind != "" || rep.Reply != "done" {
		t.Fatalf("reply %+v", rep)
	}
	got, err := os.ReadFile(filepath.Join(ws, "notes", "creds.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "token: " + redact.Redacted + "\npass: " + redact.Redacted + "\n"; string(got) != want {
		t.Errorf("creds.txt = %q, want %q", got, want)
	}
	for _, f := range []string{"SOUL.md", "MEMORY.md", "notes/creds.txt"} {
		b, err := os.ReadFile(filepath.Join(ws, f))
		if err != nil {
			t.Fatal(err)
		}
		assertNoSpelling(t, f, string(b))
		if !strings.Contains(string(b), redact.Redacted) {
			t.Errorf("%s = %q: the secret should have been replaced", f, b)
		}
	}
}
