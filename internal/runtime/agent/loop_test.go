package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func offlineReq(text string) Request {
	return Request{
		AgentID:       "a1",
		Message:       Message{ID: "m1", Text: text},
		LLM:           agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
		RedactSecrets: true,
	}
}

func TestOfflinePlainMessage(t *testing.T) {
	ws := t.TempDir()
	rep := runReq(t, ws, offlineReq("héllo"))
	want := "offline: received 5 characters; the offline provider is not a model; start a message with `!sh ` to run a shell command in the workspace."
	if rep.ErrorKind != "" || rep.Reply != want {
		t.Fatalf("reply = %q (error %s: %s), want %q", rep.Reply, rep.ErrorKind, rep.Error, want)
	}
	if rep.MessageID != "m1" || len(rep.Steps) != 1 || rep.Usage != (Usage{}) {
		t.Errorf("reply = %+v, want message m1, one step, zero usage", rep)
	}
}

func TestOfflineShell(t *testing.T) {
	ws := t.TempDir()
	rep := runReq(t, ws, offlineReq("!sh echo out; echo err >&2; pwd; echo \"$HOME\"; exit 3"))
	want := "exit 3\nout\nerr\n" + ws + "\n" + ws + "\n"
	if rep.ErrorKind != "" || rep.Reply != want {
		t.Fatalf("reply = %q (error %s: %s), want %q", rep.Reply, rep.ErrorKind, rep.Error, want)
	}
	if len(rep.Steps) != 2 || len(rep.Steps[0].ToolCalls) != 1 {
		t.Fatalf("steps = %+v, want a shell step then the answer", rep.Steps)
	}
	tc := rep.Steps[0].ToolCalls[0]
	if tc.Name != ToolShell || tc.ExitCode == nil || *tc.ExitCode != 3 || !strings.Contains(tc.Input, "exit 3") {
		t.Errorf("tool call = %+v, want shell with exit code 3", tc)
	}
	// Without the exact prefix it is a plain message.
	if rep := runReq(t, ws, offlineReq("!shecho x")); !strings.HasPrefix(rep.Reply, "offline: received 9 characters") {
		t.Errorf("'!shecho x' got %q, want the fixed answer", rep.Reply)
	}
}

func TestOfflineShellWritesWorkspace(t *testing.T) {
	ws := t.TempDir()
	rep := runReq(t, ws, offlineReq("!sh echo data > note.txt && cat note.txt"))
	if rep.Reply != "exit 0\ndata\n" {
		t.Fatalf("reply = %q (%s)", rep.Reply, rep.Error)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(b) != "data\n" {
		t.Errorf("note.txt = %q, %v", b, err)
	}
}

func TestToolEnvIsCleanUnlessAsked(t *testing.T) {
	t.Setenv("MEEPA_TEST_LEAK", "from-the-runner")
	ws := t.TempDir()
	req := offlineReq("!sh env | sort")
	req.LLM.APIKey = "sk-test-key-1234"
	req.Env = map[string]string{"GREETING": "hi"}
	rep := runReq(t, ws, req)
	for _, bad := range []string{"MEEPA_TEST_LEAK", "DB_PASSWORD", "OPENAI_API_KEY", EnvLLMAPIKey, "REDACTED"} {
		if strings.Contains(rep.Reply, bad) {
			t.Errorf("env without injection contains %s:\n%s", bad, rep.Reply)
		}
	}
	for _, good := range []string{"GREETING=hi", "HOME=" + ws, "PATH=", "TMPDIR="} {
		if !strings.Contains(rep.Reply, good) {
			t.Errorf("env lacks %s:\n%s", good, rep.Reply)
		}
	}

	// A bound secret: its placeholder, never a value.
	req.Brokered = []Brokered{{Name: "DB_PASSWORD", Placeholder: "meepa-placeholder-db_password-0123456789abcdef"}}
	req.InjectCredentialsEnv = true
	rep = runReq(t, ws, req)
	for _, want := range []string{"DB_PASSWORD=meepa-placeholder-db_password-0123456789abcdef", EnvLLMAPIKey + "=" + redact.Redacted} {
		if !strings.Contains(rep.Reply, want) {
			t.Errorf("injected env lacks %s:\n%s", want, rep.Reply)
		}
	}
}

func TestRedactionOfflineCredentials(t *testing.T) {
	ws := t.TempDir()
	const key = "sk-offline-secret-9876"
	req := offlineReq("!sh echo \"key=$" + EnvLLMAPIKey + "\"; echo " + key + " >&2")
	req.LLM.APIKey = key
	req.InjectCredentialsEnv = true
	rep := runReq(t, ws, req)
	if rep.Reply != "exit 0\nkey="+redact.Redacted+"\n"+redact.Redacted+"\n" {
		t.Fatalf("reply = %q, want the key redacted", rep.Reply)
	}
	all, _ := json.Marshal(rep)
	if strings.Contains(string(all), key) {
		t.Errorf("key in reply JSON: %s", all)
	}
	assertNoSecretOnDisk(t, ws, key)

	// redact_secrets off: the reply shows it, the disk still does not.
	req.RedactSecrets = false
	rep = runReq(t, ws, req)
	if !strings.Contains(rep.Reply, "key="+key) {
		t.Errorf("reply without redaction = %q, want the key", rep.Reply)
	}
	assertNoSecretOnDisk(t, ws, key)
}

// scripted is a Client that answers from a function and records requests.
type scripted struct {
	calls []Completion
	next  func(n int, c Completion) (Answer, error)
}

func (s *scripted) Complete(_ context.Context, c Completion) (Answer, error) {
	s.calls = append(s.calls, c)
	return s.next(len(s.calls), c)
}

func TestStepBound(t *testing.T) {
	ws := t.TempDir()
	loop := &scripted{next: func(n int, _ Completion) (Answer, error) {
		return Answer{ToolCalls: []ToolUse{{ID: "c", Name: ToolListFiles, Input: json.RawMessage(`{}`)}}, Usage: Usage{InputTokens: 1, OutputTokens: 2}}, nil
	}}
	req := offlineReq("loop forever")
	req.MaxSteps = 3
	rep := Run(context.Background(), &req, Options{Workspace: ws, Client: loop})
	if rep.ErrorKind != ErrKindSteps || len(loop.calls) != 3 || len(rep.Steps) != 3 {
		t.Fatalf("error kind %q after %d calls, %d steps; want %q after 3", rep.ErrorKind, len(loop.calls), len(rep.Steps), ErrKindSteps)
	}
	if rep.Usage != (Usage{InputTokens: 3, OutputTokens: 6}) {
		t.Errorf("usage = %+v, want summed over 3 steps", rep.Usage)
	}

	loop.calls = nil
	req.MaxSteps = 0
	rep = Run(context.Background(), &req, Options{Workspace: ws, Client: loop})
	if rep.ErrorKind != ErrKindSteps || len(loop.calls) != agentspec.DefaultMaxSteps {
		t.Errorf("default bound: %d calls, kind %q; want %d", len(loop.calls), rep.ErrorKind, agentspec.DefaultMaxSteps)
	}
}

func TestLLMErrorIsRedacted(t *testing.T) {
	ws := t.TempDir()
	req := offlineReq("hi")
	req.LLM.APIKey = "tok-abcdef"
	c := &scripted{next: func(int, Completion) (Answer, error) {
		return Answer{}, errors.New("gateway said: bad token tok-abcdef")
	}}
	rep := Run(context.Background(), &req, Options{Workspace: ws, Client: c})
	if rep.ErrorKind != ErrKindLLM || rep.Error != "gateway said: bad token "+redact.Redacted {
		t.Errorf("got %q %q", rep.ErrorKind, rep.Error)
	}
}

func TestMemoryHistoryAcrossRuns(t *testing.T) {
	ws := t.TempDir()
	c := &scripted{next: func(n int, c Completion) (Answer, error) {
		return Answer{Text: "answer " + c.Messages[len(c.Messages)-1].Text}, nil
	}}
	req := offlineReq("first")
	req.LLM = agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m"}
	req.Message.ConversationID = "conv-1"
	if rep := Run(context.Background(), &req, Options{Workspace: ws, Client: c}); rep.ErrorKind != "" {
		t.Fatal(rep.Error)
	}
	// Another conversation must not leak into conv-1.
	other := req
	other.Message.ConversationID = "conv-2"
	other.Message.Text = "elsewhere"
	Run(context.Background(), &other, Options{Workspace: ws, Client: c})

	req.Message.Text = "second"
	req.Message.ID = "m2"
	rep := Run(context.Background(), &req, Options{Workspace: ws, Client: c})
	if rep.Reply != "answer second" {
		t.Fatalf("reply = %q (%s)", rep.Reply, rep.Error)
	}
	msgs := c.calls[len(c.calls)-1].Messages
	var got []string
	for _, m := range msgs {
		got = append(got, m.Role+":"+m.Text)
	}
	want := []string{"user:first", "assistant:answer first", "user:second"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("messages sent = %v, want %v", got, want)
	}

	mem, err := OpenMemory(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mem.Close() }()
	h, err := mem.History(context.Background(), "conv-1", 100)
	if err != nil || len(h) != 4 {
		t.Errorf("conv-1 history = %v, %v; want 4 messages", h, err)
	}
	if _, err := os.Stat(filepath.Join(ws, MemoryFile+"-journal")); !os.IsNotExist(err) {
		t.Errorf("a rollback journal is left in the workspace: %v", err)
	}
}

func TestOfflineSkipsHistoryButKeepsMemory(t *testing.T) {
	ws := t.TempDir()
	c := &scripted{next: func(n int, c Completion) (Answer, error) { return Answer{Text: "ok"}, nil }}
	req := offlineReq("one")
	Run(context.Background(), &req, Options{Workspace: ws, Client: c})
	Run(context.Background(), &req, Options{Workspace: ws, Client: c})
	if n := len(c.calls[1].Messages); n != 1 {
		t.Errorf("offline got %d messages, want only the new one", n)
	}
	mem, err := OpenMemory(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mem.Close() }()
	if h, _ := mem.History(context.Background(), DefaultConversation, 100); len(h) != 4 {
		t.Errorf("default conversation has %d messages, want 4", len(h))
	}
}

func TestRequestErrors(t *testing.T) {
	ws := t.TempDir()
	for name, tc := range map[string]struct {
		data string
		want string
	}{
		"not json":     {`{"message":`, "decode request"},
		"no text":      {`{"message":{"id":"x"},"llm":{"provider":"offline"}}`, "message.text is empty"},
		"bad provider": {`{"message":{"text":"x"},"llm":{"provider":"gpt"}}`, `llm.provider "gpt"`},
		"bad steps":    {`{"message":{"text":"x"},"llm":{"provider":"offline"},"max_steps":-1}`, "max_steps -1"},
		"bad env":      {`{"message":{"text":"x"},"llm":{"provider":"offline"},"env":{"A-B":"x"}}`, `"A-B" is not an environment variable name`},
		"no model":     {`{"message":{"text":"x"},"llm":{"provider":"openai"}}`, "llm.model is required"},
	} {
		t.Run(name, func(t *testing.T) {
			rep := RunJSON(context.Background(), []byte(tc.data), Options{Workspace: ws})
			if rep.ErrorKind != ErrKindRequest || !strings.Contains(rep.Error, tc.want) {
				t.Errorf("got %q %q, want request error with %q", rep.ErrorKind, rep.Error, tc.want)
			}
		})
	}
}

func TestWorkspaceErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	testutil.Must(t, os.WriteFile(file, nil, 0o644))
	for name, ws := range map[string]string{"missing": filepath.Join(dir, "nope"), "file": file} {
		rep := runReq(t, ws, offlineReq("x"))
		if rep.ErrorKind != ErrKindWorkspace {
			t.Errorf("%s: kind %q (%s), want %q", name, rep.ErrorKind, rep.Error, ErrKindWorkspace)
		}
	}
}

func TestWorkspaceNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes through permission bits; the runner tests cover another uid's workspace")
	}
	ws := t.TempDir()
	testutil.Must(t, os.Chmod(ws, 0o555))
	t.Cleanup(func() {
		// Writable again, so t.TempDir can remove it.
		if err := os.Chmod(ws, 0o755); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	rep := runReq(t, ws, offlineReq("x"))
	if rep.ErrorKind != ErrKindWorkspace || !strings.Contains(rep.Error, "not writable") {
		t.Errorf("got %q %q", rep.ErrorKind, rep.Error)
	}
}

func TestToolEnvRefusesReservedNames(t *testing.T) {
	for _, k := range []string{"HOME", "TMPDIR", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "gh-token", "1X", ""} {
		if agentspec.CheckToolEnvName(k) == nil {
			t.Errorf("CheckToolEnvName(%q) = nil, want an error", k)
		}
		req := &Request{Brokered: []Brokered{{Name: k, Placeholder: "p"}}}
		if _, err := toolEnv(req, "/workspace"); err == nil {
			t.Errorf("toolEnv with bound secret %q: no error", k)
		}
		req = &Request{Env: map[string]string{k: "value"}}
		if _, err := toolEnv(req, "/workspace"); err == nil {
			t.Errorf("toolEnv with env %q: no error", k)
		}
	}
	env, err := toolEnv(&Request{Brokered: []Brokered{{Name: "GH_TOKEN", Placeholder: "t"}}}, "/ws")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "GH_TOKEN=t") || !slices.Contains(env, "HOME=/ws") {
		t.Fatalf("env %v lacks GH_TOKEN or HOME", env)
	}
}
