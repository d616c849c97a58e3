package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// syncBuffer is the log output: handlers write it while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// The audit trail (issue 3): exactly one line per message that ran, with
// the message id, the container id, the image id, the duration, the
// outcome and the bytes in and out; and, at the most verbose level, no
// message text, reply, token, API key or secret anywhere in the log, even
// when the sandbox echoes them in its reply, its stderr or its error.
func TestAuditLineOnePerMessageNoTextNoSecrets(t *testing.T) {
	const (
		text        = "summarise the zebra-7731 plan"
		containerID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		imageID     = "sha256:feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface"
	)
	cfg := testConfig()
	leak := text + " " + cfg.LLM.APIKey + " " + cfg.Secrets["GH"] + " " + cfg.Token
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		kind, _, _ := strings.Cut(req.Message.Text, ":")
		switch kind {
		case "ok":
			return sandbox.Outcome{SandboxID: containerID, ImageID: imageID,
				Stdout: mustJSON(t, agent.Reply{MessageID: req.Message.ID, Reply: "you said " + leak})}, nil
		case "exit":
			return sandbox.Outcome{SandboxID: containerID, ImageID: imageID, ExitCode: 3, StderrTail: []byte("panic: " + leak)}, nil
		case "llm":
			return sandbox.Outcome{SandboxID: containerID, ImageID: imageID,
				Stdout: mustJSON(t, agent.Reply{MessageID: req.Message.ID, ErrorKind: agent.ErrKindLLM, Error: "401: " + leak})}, nil
		case "sandbox":
			return sandbox.Outcome{}, errors.New("create: " + cfg.LLM.APIKey + " " + cfg.Secrets["GH"])
		}
		t.Errorf("unexpected message %q", req.Message.Text)
		return sandbox.Outcome{}, errors.New("unexpected")
	}}
	logs := &syncBuffer{}
	s, err := New(context.Background(), cfg, Options{
		// Trace: not even the most verbose level may show the text or a secret.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "agent-runner", Level: hclog.Trace, JSONFormat: true, Output: logs}),
		NewBackend: func(context.Context, *agentspec.Config, *relay.Relay, hclog.Logger) (sandbox.Backend, string, error) {
			return b, backends.ModeContainer, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()

	type sent struct {
		outcome  string
		bytesIn  int
		bytesOut int
		sandbox  string
		image    string
	}
	ran := map[string]sent{} // by X-Message-Id
	for _, c := range []struct{ kind, outcome string }{
		{"ok", "ok"}, {"exit", agent.ErrKindExit}, {"llm", agent.ErrKindLLM}, {"sandbox", agent.ErrKindSandbox}, {"ok", "ok"},
	} {
		body, _ := json.Marshal(MessageRequest{Text: c.kind + ": " + text, Sender: "bob", ConversationID: "k"})
		id, raw := postRaw(t, ts.URL, cfg.Token, body)
		if id == "" {
			t.Fatalf("%s: no X-Message-Id: %s", c.kind, raw)
		}
		want := sent{outcome: c.outcome, bytesIn: len(body), bytesOut: len(bytes.TrimSuffix(raw, []byte("\n"))),
			sandbox: containerID[:12], image: imageID}
		if c.kind == "sandbox" {
			want.sandbox, want.image = "", ""
		}
		ran[id] = want
	}
	// Rejected before they run: no audit line, and their text is not logged.
	body, _ := json.Marshal(MessageRequest{Text: "rejected " + text})
	if id, raw := postRaw(t, ts.URL, "wrong-token", body); id != "" {
		t.Fatalf("unauthorized message ran: %s", raw)
	}

	out := logs.Bytes()
	for _, v := range []string{"zebra-7731", cfg.LLM.APIKey, cfg.Secrets["GH"], cfg.Token} {
		if bytes.Contains(out, []byte(v)) {
			t.Errorf("the log contains %q:\n%s", v, out)
		}
	}
	audited := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		if line["@message"] != "message" {
			continue
		}
		id, _ := line["message_id"].(string)
		audited[id]++
		want, ok := ran[id]
		if !ok {
			t.Errorf("audit line for a message that did not run: %v", line)
			continue
		}
		if line["outcome"] != want.outcome || line["sandbox_id"] != want.sandbox || line["image_id"] != want.image ||
			line["bytes_in"] != float64(want.bytesIn) || line["bytes_out"] != float64(want.bytesOut) || line["agent_id"] != cfg.AgentID {
			t.Errorf("audit line %v, want %+v", line, want)
		}
		if d, ok := line["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("audit line without duration_ms: %v", line)
		}
	}
	if len(audited) != len(ran) {
		t.Errorf("audit lines for %d messages, want %d:\n%s", len(audited), len(ran), out)
	}
	for id := range ran {
		if audited[id] != 1 {
			t.Errorf("message %s has %d audit lines, want 1:\n%s", id, audited[id], out)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// postRaw posts a message and returns its X-Message-Id and the raw answer.
func postRaw(t *testing.T, url, token string, body []byte) (string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.Header.Get("X-Message-Id"), raw
}
