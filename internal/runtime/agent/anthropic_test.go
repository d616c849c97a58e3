package agent

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

func anthropicAnswer(t *testing.T, stop string, content ...any) fakeAnswer {
	return fakeAnswer{body: mustJSON(t, map[string]any{
		"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": 20, "output_tokens": 5},
	})}
}

func TestAnthropicToolRoundTrip(t *testing.T) {
	const key = "sk-ant-test-key-1234"
	fake := newFakeLLM(t, "/v1/messages",
		anthropicAnswer(t, "tool_use",
			map[string]any{"type": "text", "text": "Let me look."},
			map[string]any{"type": "tool_use", "id": "toolu_1", "name": ToolWriteFile, "input": map[string]any{"path": "notes/todo.txt", "content": "buy milk"}},
			map[string]any{"type": "tool_use", "id": "toolu_2", "name": ToolShell, "input": map[string]any{"command": "cat notes/todo.txt; echo \" $ANTHROPIC_API_KEY\""}},
		),
		anthropicAnswer(t, "end_turn", map[string]any{"type": "text", "text": "Saved your list."}),
	)
	ws := t.TempDir()
	rep := runReq(t, ws, Request{
		Message:              Message{ID: "m1", Text: "remember milk"},
		LLM:                  agentspec.LLMConfig{Provider: agentspec.ProviderAnthropic, Model: "claude-test", BaseURL: fake.srv.URL, APIKey: key},
		InjectCredentialsEnv: true,
		RedactSecrets:        true,
	})
	if rep.ErrorKind != "" || rep.Reply != "Saved your list." {
		t.Fatalf("reply %q, %s: %s", rep.Reply, rep.ErrorKind, rep.Error)
	}
	if len(rep.Steps) != 2 || rep.Steps[0].Text != "Let me look." || len(rep.Steps[0].ToolCalls) != 2 {
		t.Fatalf("steps = %+v", rep.Steps)
	}
	if out := rep.Steps[0].ToolCalls[1].Output; out != "buy milk "+redact.Redacted+"\n" {
		t.Errorf("shell output = %q", out)
	}
	if rep.Usage != (Usage{InputTokens: 40, OutputTokens: 10}) {
		t.Errorf("usage = %+v", rep.Usage)
	}

	reqs := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	if got := fake.headers[0].Get("X-Api-Key"); got != key {
		t.Errorf("x-api-key = %q", got)
	}
	first := reqs[0]
	if first["model"] != "claude-test" || first["max_tokens"] != float64(agentspec.DefaultAnthropicMaxTokens) {
		t.Errorf("model %v max_tokens %v", first["model"], first["max_tokens"])
	}
	if sys := mustJSON(t, first["system"]); !strings.Contains(sys, "You are an agent") {
		t.Errorf("system = %s", sys)
	}
	tool0 := first["tools"].([]any)[0].(map[string]any)
	schema := tool0["input_schema"].(map[string]any)
	if tool0["name"] != ToolShell || schema["type"] != "object" || mustJSON(t, schema["required"]) != `["command"]` {
		t.Errorf("first tool = %v", tool0)
	}
	msgs := reqs[1]["messages"].([]any)
	if len(msgs) != 3 {
		t.Fatalf("second request has %d messages, want user, assistant, user(tool results)", len(msgs))
	}
	asst := msgs[1].(map[string]any)
	blocks := asst["content"].([]any)
	use := blocks[1].(map[string]any)
	if asst["role"] != "assistant" || use["type"] != "tool_use" || use["id"] != "toolu_1" || use["name"] != ToolWriteFile {
		t.Errorf("assistant turn = %v", asst)
	}
	results := msgs[2].(map[string]any)
	rb := results["content"].([]any)
	if results["role"] != "user" || len(rb) != 2 {
		t.Fatalf("tool results turn = %v", results)
	}
	r0, r1 := rb[0].(map[string]any), rb[1].(map[string]any)
	if r0["type"] != "tool_result" || r0["tool_use_id"] != "toolu_1" || r1["tool_use_id"] != "toolu_2" {
		t.Errorf("tool results = %v", rb)
	}
	if s := mustJSON(t, r1["content"]); !strings.Contains(s, `exit_code: 0\nbuy milk [REDACTED]`) {
		t.Errorf("shell result to the model = %s", s)
	}
	all, _ := json.Marshal(reqs[1])
	if strings.Contains(string(all), key) {
		t.Error("the key reached the model in a tool result")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes", "todo.txt")); string(b) != "buy milk" {
		t.Errorf("todo.txt = %q", b)
	}
	assertNoSecretOnDisk(t, ws, key)
}

func TestAnthropicToolError(t *testing.T) {
	fake := newFakeLLM(t, "/v1/messages",
		anthropicAnswer(t, "tool_use", map[string]any{"type": "tool_use", "id": "toolu_9", "name": ToolReadFile, "input": map[string]any{"path": "../../etc/passwd"}}),
		anthropicAnswer(t, "end_turn", map[string]any{"type": "text", "text": "I cannot read that."}),
	)
	rep := runReq(t, t.TempDir(), Request{
		Message: Message{ID: "m1", Text: "read passwd"},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderAnthropic, Model: "claude-test", BaseURL: fake.srv.URL},
	})
	if rep.Reply != "I cannot read that." || !strings.Contains(rep.Steps[0].ToolCalls[0].Error, "outside the workspace") {
		t.Fatalf("reply %q steps %+v (%s)", rep.Reply, rep.Steps, rep.Error)
	}
	res := fake.requests()[1]["messages"].([]any)[2].(map[string]any)["content"].([]any)[0].(map[string]any)
	if res["is_error"] != true {
		t.Errorf("tool result = %v, want is_error", res)
	}
}

func TestAnthropicErrors(t *testing.T) {
	const key = "sk-ant-bad-key-5555"
	fake := newFakeLLM(t, "/v1/messages", fakeAnswer{
		status: http.StatusUnauthorized,
		body:   `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + key + `"}}`,
	})
	rep := runReq(t, t.TempDir(), Request{
		Message:       Message{ID: "m1", Text: "hi"},
		LLM:           agentspec.LLMConfig{Provider: agentspec.ProviderAnthropic, Model: "claude-test", BaseURL: fake.srv.URL, APIKey: key},
		RedactSecrets: true,
	})
	if rep.ErrorKind != ErrKindLLM || rep.Error != "anthropic: 401 Unauthorized: authentication_error: invalid x-api-key "+redact.Redacted {
		t.Errorf("got %q %q", rep.ErrorKind, rep.Error)
	}

	fake = newFakeLLM(t, "/v1/messages", fakeAnswer{status: http.StatusBadRequest, body: `not json at all`})
	rep = runReq(t, t.TempDir(), Request{
		Message: Message{ID: "m1", Text: "hi"},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderAnthropic, Model: "claude-test", BaseURL: fake.srv.URL},
	})
	if rep.ErrorKind != ErrKindLLM || !strings.HasPrefix(rep.Error, "anthropic: 400 Bad Request") {
		t.Errorf("got %q %q", rep.ErrorKind, rep.Error)
	}
}
