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
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func openaiAnswer(t *testing.T, msg map[string]any, finish string) fakeAnswer {
	return fakeAnswer{body: mustJSON(t, map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
	})}
}

func openaiToolCall(t *testing.T, id, name string, args map[string]any) fakeAnswer {
	return openaiAnswer(t, map[string]any{
		"role": "assistant", "content": nil,
		"tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": mustJSON(t, args)}}},
	}, "tool_calls")
}

func openaiText(t *testing.T, text string) fakeAnswer {
	return openaiAnswer(t, map[string]any{"role": "assistant", "content": text}, "stop")
}

func TestOpenAIToolRoundTrip(t *testing.T) {
	const key = "sk-openai-test-key-42"
	fake := newFakeLLM(t, "/v1/chat/completions",
		openaiToolCall(t, "call_1", ToolShell, map[string]any{"command": `echo "k=$OPENAI_API_KEY"; echo hi > made.txt`}),
		openaiText(t, "done; by the way the key is "+key),
	)
	ws := t.TempDir()
	testutil.Must(t, os.WriteFile(filepath.Join(ws, "SOUL.md"), []byte("You are Wren."), 0o644))
	rep := runReq(t, ws, Request{
		Message:              Message{ID: "m1", Text: "make a file"},
		LLM:                  agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "gpt-test", BaseURL: fake.srv.URL + "/v1", APIKey: key},
		InjectCredentialsEnv: true,
		RedactSecrets:        true,
	})
	if rep.ErrorKind != "" {
		t.Fatalf("%s: %s", rep.ErrorKind, rep.Error)
	}
	if rep.Reply != "done; by the way the key is "+redact.Redacted {
		t.Errorf("reply = %q", rep.Reply)
	}
	if len(rep.Steps) != 2 || len(rep.Steps[0].ToolCalls) != 1 {
		t.Fatalf("steps = %+v", rep.Steps)
	}
	tc := rep.Steps[0].ToolCalls[0]
	if tc.Name != ToolShell || tc.Output != "k="+redact.Redacted+"\n" || tc.ExitCode == nil || *tc.ExitCode != 0 {
		t.Errorf("tool call = %+v", tc)
	}
	if rep.Usage != (Usage{InputTokens: 22, OutputTokens: 14}) {
		t.Errorf("usage = %+v", rep.Usage)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "made.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("made.txt: %q %v", b, err)
	}

	reqs := fake.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	if got := fake.headers[0].Get("Authorization"); got != "Bearer "+key {
		t.Errorf("Authorization = %q", got)
	}
	first := reqs[0]
	msgs := first["messages"].([]any)
	if first["model"] != "gpt-test" || len(msgs) != 2 {
		t.Fatalf("first request: model %v, %d messages", first["model"], len(msgs))
	}
	sys, user := msgs[0].(map[string]any), msgs[1].(map[string]any)
	if sys["role"] != "system" || !strings.Contains(sys["content"].(string), "You are Wren.") || user["role"] != "user" || user["content"] != "make a file" {
		t.Errorf("first messages = %v", msgs)
	}
	var tools []string
	for _, tl := range first["tools"].([]any) {
		fn := tl.(map[string]any)["function"].(map[string]any)
		tools = append(tools, fn["name"].(string))
		if _, ok := fn["parameters"].(map[string]any)["properties"]; !ok {
			t.Errorf("tool %v has no parameter schema", fn["name"])
		}
	}
	if strings.Join(tools, ",") != "shell,read_file,write_file,list_files" {
		t.Errorf("tools = %v", tools)
	}
	msgs = reqs[1]["messages"].([]any)
	if len(msgs) != 4 {
		t.Fatalf("second request has %d messages, want system, user, assistant, tool", len(msgs))
	}
	asst, tool := msgs[2].(map[string]any), msgs[3].(map[string]any)
	call := asst["tool_calls"].([]any)[0].(map[string]any)
	if asst["role"] != "assistant" || call["id"] != "call_1" || call["function"].(map[string]any)["name"] != ToolShell {
		t.Errorf("assistant turn = %v", asst)
	}
	if tool["role"] != "tool" || tool["tool_call_id"] != "call_1" || tool["content"] != "exit_code: 0\nk="+redact.Redacted+"\n" {
		t.Errorf("tool turn = %v", tool)
	}
	all, _ := json.Marshal(rep)
	if strings.Contains(string(all), key) {
		t.Errorf("key in reply: %s", all)
	}
	assertNoSecretOnDisk(t, ws, key)
}

func TestOpenAIErrors(t *testing.T) {
	const key = "sk-openai-bad-key-77"
	fake := newFakeLLM(t, "/v1/chat/completions", fakeAnswer{
		status: http.StatusUnauthorized,
		body:   `{"error":{"message":"Incorrect API key provided: ` + key + `","type":"invalid_request_error","code":"invalid_api_key"}}`,
	})
	ws := t.TempDir()
	req := Request{
		Message:       Message{ID: "m1", Text: "hi"},
		LLM:           agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "gpt-test", BaseURL: fake.srv.URL + "/v1", APIKey: key},
		RedactSecrets: true,
	}
	rep := runReq(t, ws, req)
	if rep.ErrorKind != ErrKindLLM || rep.Error != "openai: 401 Unauthorized: Incorrect API key provided: "+redact.Redacted {
		t.Errorf("got %q %q", rep.ErrorKind, rep.Error)
	}
	if len(fake.requests()) != 1 {
		t.Errorf("a 401 was retried: %d requests", len(fake.requests()))
	}

	// A 500 is retried by the SDK (twice), then reported.
	boom := fakeAnswer{status: 500, body: `{"error":{"message":"upstream exploded"}}`, header: map[string]string{"Retry-After-Ms": "1"}}
	fake = newFakeLLM(t, "/v1/chat/completions", boom, boom, boom)
	req.LLM.BaseURL = fake.srv.URL + "/v1"
	rep = runReq(t, ws, req)
	if rep.ErrorKind != ErrKindLLM || rep.Error != "openai: 500 Internal Server Error: upstream exploded" || len(fake.requests()) != 3 {
		t.Errorf("got %q %q after %d requests", rep.ErrorKind, rep.Error, len(fake.requests()))
	}

	// Nothing listening.
	req.LLM.BaseURL = "http://127.0.0.1:1/v1"
	rep = runReq(t, ws, req)
	if rep.ErrorKind != ErrKindLLM || !strings.Contains(rep.Error, "connection refused") {
		t.Errorf("got %q %q", rep.ErrorKind, rep.Error)
	}
}

func TestOpenAIHistoryAcrossRuns(t *testing.T) {
	fake := newFakeLLM(t, "/v1/chat/completions", openaiText(t, "hello Ana"), openaiText(t, "you are Ana"))
	ws := t.TempDir()
	req := Request{
		Message: Message{ID: "m1", Text: "my name is Ana", ConversationID: "c1"},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "gpt-test", BaseURL: fake.srv.URL + "/v1"},
	}
	if rep := runReq(t, ws, req); rep.Reply != "hello Ana" {
		t.Fatalf("first reply %q (%s)", rep.Reply, rep.Error)
	}
	req.Message = Message{ID: "m2", Text: "who am I?", ConversationID: "c1"}
	if rep := runReq(t, ws, req); rep.Reply != "you are Ana" {
		t.Fatalf("second reply %q (%s)", rep.Reply, rep.Error)
	}
	var got []string
	for _, m := range fake.requests()[1]["messages"].([]any)[1:] {
		mm := m.(map[string]any)
		got = append(got, mm["role"].(string)+":"+mm["content"].(string))
	}
	want := "user:my name is Ana|assistant:hello Ana|user:who am I?"
	if strings.Join(got, "|") != want {
		t.Errorf("second request messages = %v, want %s", got, want)
	}
}
