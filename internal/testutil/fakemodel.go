package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// FakeModel is an OpenAI-compatible chat completions endpoint on loopback
// for tests of the real loop, relay and sandbox: a user message whose text
// names a command is answered with a shell tool call running it, any other
// turn with the answer "done", each reporting 13 input and 5 output
// tokens. A body with "q":"ECHO-AUTH" in it (a tool's own call) gets a
// 401 that echoes the Authorization header it came with, as a careless
// gateway might. It records the Authorization header of every call.
type FakeModel struct {
	mu       sync.Mutex
	auth     []string
	commands map[string]string
	srv      *httptest.Server
	// OnCall, when set, runs at each call before the answer (e.g. to
	// inspect the sandbox while the message runs).
	OnCall func()
	// EchoTools makes the answer to a tool turn the tool's output instead
	// of "done", as a model repeating what a tool printed would.
	EchoTools bool
}

// NewFakeModel starts one; commands maps a message text to a shell command.
func NewFakeModel(t testing.TB, commands map[string]string) *FakeModel {
	m := &FakeModel{commands: map[string]string{}}
	for k, v := range commands {
		m.commands[k] = v
	}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

// ServeOn serves the same endpoint on ln too (a listener in another
// network namespace), until the test ends.
func (m *FakeModel) ServeOn(t testing.TB, ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(m.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends with Close below
	t.Cleanup(func() { _ = srv.Close() })
}

// URL is the endpoint's root; a base_url is URL()+"/v1".
func (m *FakeModel) URL() string { return m.srv.URL }

// SetCommand adds or replaces the command for a message text.
func (m *FakeModel) SetCommand(text, command string) {
	m.mu.Lock()
	m.commands[text] = command
	m.mu.Unlock()
}

// Seen returns the Authorization header of every call so far.
func (m *FakeModel) Seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.auth...)
}

func (m *FakeModel) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	m.auth = append(m.auth, r.Header.Get("Authorization"))
	onCall := m.OnCall
	m.mu.Unlock()
	if onCall != nil {
		onCall()
	}
	w.Header().Set("Content-Type", "application/json")
	if bytes.Contains(raw, []byte(`"q":"ECHO-AUTH"`)) {
		w.WriteHeader(http.StatusUnauthorized)
		// A failed write shows as the client's error, which the test checks.
		_, _ = fmt.Fprintf(w, `{"error":{"message":"bad credential %s"}}`, r.Header.Get("Authorization"))
		return
	}
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Messages) == 0 {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprint(w, `{"error":{"message":"no messages"}}`) // as above
		return
	}
	last := req.Messages[len(req.Messages)-1]
	msg := map[string]any{"role": "assistant", "content": "done"}
	finish := "stop"
	text, _ := last.Content.(string)
	m.mu.Lock()
	cmd := m.commands[text]
	m.mu.Unlock()
	if s, ok := last.Content.(string); ok && last.Role == "tool" && m.EchoTools {
		msg["content"] = s
	}
	if last.Role == "user" && cmd != "" {
		args, _ := json.Marshal(map[string]string{"command": cmd})
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "call-1", "type": "function", "function": map[string]any{"name": "shell", "arguments": string(args)},
		}}}
		finish = "tool_calls"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "c", "object": "chat.completion", "created": 0, "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18},
	})
}
