package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// fakeModel is an OpenAI-compatible (and Anthropic) endpoint on loopback
// that records what reached it.
type fakeModel struct {
	mu    sync.Mutex
	auth  []string // Authorization or x-api-key of each request
	paths []string
	srv   *httptest.Server
}

func newFakeModel(t *testing.T) *fakeModel {
	f := &fakeModel{}
	// A failed write below shows as the client's error, which the tests check.
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		a := r.Header.Get("Authorization")
		if a == "" {
			a = "x-api-key " + r.Header.Get("X-Api-Key")
		}
		f.auth = append(f.auth, a)
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(string(body), "ECHO-AUTH"):
			// An endpoint that echoes the credential in its error.
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"bad key %s"}}`, a)
		case strings.Contains(string(body), "REDIRECT"):
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		case strings.HasSuffix(r.URL.Path, "/v1/messages"):
			_, _ = fmt.Fprint(w, `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":3}}`)
		default:
			_, _ = fmt.Fprint(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7}}`)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeModel) seen() ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...), append([]string(nil), f.paths...)
}

// okBody is a model call the relay forwards for model "m" under the
// default limits.
const okBody = `{"model":"m","max_tokens":16}`

// The relay adds the key on the way out and nowhere else, answers only a
// live message's token, forwards only the configured endpoint, and counts
// the tokens the answers report.
func TestRelayForwardsOnlyWithLiveToken(t *testing.T) {
	const key = "sk-relay-test-5d1e0c"
	model := newFakeModel(t)
	m := &counts{}
	r := New(hclog.NewNullLogger(), m, nil)
	dir := filepath.Join(t.TempDir(), "relay")
	if err := r.Listen(dir); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "relay", r.Close)
	c := testutil.RelayClient(filepath.Join(dir, SocketName))
	llm := agentspec.LLMConfig{Provider: agentspec.ProviderOpenAI, Model: "m", BaseURL: model.srv.URL + "/v1/", APIKey: key}

	token, end := r.Begin("msg-1", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
	st, body := testutil.RelayPost(t, c, "/openai/chat/completions", token, okBody)
	if st != 200 || !strings.Contains(body, `"hi"`) {
		t.Fatalf("relayed call: %d %s", st, body)
	}
	auth, paths := model.seen()
	if len(auth) != 1 || auth[0] != "Bearer "+key || paths[0] != "/v1/chat/completions" {
		t.Fatalf("the model endpoint got auth %q at %q; want the key at /v1/chat/completions", auth, paths)
	}

	refusals := []struct {
		name, path, auth, body string
		status                 int
	}{
		{"no token", "/openai/chat/completions", "", `{}`, 401},
		{"the key itself is not a token", "/openai/chat/completions", key, `{}`, 401},
		{"another path", "/openai/models", token, `{}`, 404},
		{"a dot-dot path", "/openai/../openai/chat/completions", token, `{}`, 404},
		{"the other wire format", "/anthropic/v1/messages", token, `{}`, 404},
		{"streaming", "/openai/chat/completions", token, `{"stream":true}`, 400},
		{"not JSON", "/openai/chat/completions", token, `x`, 400},
		{"too large", "/openai/chat/completions", token, `{"x":"` + strings.Repeat("a", agent.MaxRequestBytes) + `"}`, 413},
	}
	for _, rc := range refusals {
		if st, body := testutil.RelayPost(t, c, rc.path, rc.auth, rc.body); st != rc.status {
			t.Errorf("%s: %d %s, want %d", rc.name, st, body, rc.status)
		}
	}
	// A proxy-style request for another host is refused, not forwarded.
	conn, err := net.Dial("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST http://example.invalid/openai/chat/completions HTTP/1.1\r\nHost: example.invalid\r\nAuthorization: Bearer %s\r\nContent-Length: 2\r\n\r\n{}", token); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if cerr := conn.Close(); cerr != nil {
		t.Error(cerr)
	}
	if err == nil {
		_ = resp.Body.Close() // only the status is checked
	}
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("absolute-form request for another host: %v %v, want 403", resp, err)
	}
	// The key, echoed by the endpoint, does not come back: an error's
	// body is the relay's own; a redirect is handed back, never followed
	// with the key.
	if st, body := testutil.RelayPost(t, c, "/openai/chat/completions", token, `{"model":"m","max_tokens":16,"q":"ECHO-AUTH"}`); st != 401 || strings.Contains(body, key) || !strings.Contains(body, "meepa_relay") {
		t.Errorf("echoed key: %d %s", st, body)
	}
	if st, _ := testutil.RelayPost(t, c, "/openai/chat/completions", token, `{"model":"m","max_tokens":16,"q":"REDIRECT"}`); st != http.StatusTemporaryRedirect {
		t.Errorf("redirect: %d, want it handed back as 307", st)
	}

	u := end()
	if u.Calls != 3 || u.InputTokens != 11 || u.OutputTokens != 7 || u.Refused != 7 {
		t.Errorf("usage = %+v, want 3 calls, 11/7 tokens, 7 refused", u)
	}
	// The message is over: its token is dead, and a new message's token
	// works only for itself.
	if st, _ := testutil.RelayPost(t, c, "/openai/chat/completions", token, `{}`); st != 401 {
		t.Errorf("token of an ended message: %d, want 401", st)
	}
	t2, end2 := r.Begin("msg-2", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
	if st, _ := testutil.RelayPost(t, c, "/openai/chat/completions", t2, okBody); st != 200 {
		t.Errorf("second message: %d", st)
	}
	end2()

	if m.in != 22 || m.calls["unauthorized"] != 3 {
		t.Errorf("metrics: %d input tokens, %d unauthorized calls; want 22 and 3", m.in, m.calls["unauthorized"])
	}
	if auth, _ := model.seen(); len(auth) != 4 {
		t.Errorf("the model endpoint got %d calls, want 4 (two of each message, the echo and the redirect): %q", len(auth), auth)
	}
}

// Anthropic's wire format: x-api-key replaced, version passed, usage read.
// Over a socketpair, as a host-mode child uses it.
func TestRelayAnthropicOverPair(t *testing.T) {
	const key = "sk-ant-relay-test-77aa"
	model := newFakeModel(t)
	r := New(hclog.NewNullLogger(), &counts{}, nil)
	llm := agentspec.LLMConfig{Provider: agentspec.ProviderAnthropic, Model: "m", BaseURL: model.srv.URL + "/", APIKey: key}
	token, end := r.Begin("msg-a", llm, agentspec.LLMLimits{}, 10*time.Second, Asks{})
	child, stop, err := r.Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	conn, err := net.FileConn(child)
	if cerr := child.Close(); cerr != nil { // conn holds its own descriptor
		t.Error(cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	used := false
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DialContext: func(context.Context, string, string) (net.Conn, error) {
		if used {
			return nil, fmt.Errorf("dialled twice")
		}
		used = true
		return conn, nil
	}}}
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest(http.MethodPost, "http://meepa-relay/anthropic/v1/messages", strings.NewReader(okBody))
		req.Header.Set("X-Api-Key", token)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		decErr := json.NewDecoder(resp.Body).Decode(&m)
		_ = resp.Body.Close() // read: the answer is one JSON object
		if resp.StatusCode != http.StatusOK || decErr != nil {
			t.Fatalf("call %d: %d %v %v", i, resp.StatusCode, m, decErr)
		}
	}
	auth, paths := model.seen()
	if len(auth) != 2 || auth[0] != "x-api-key "+key || paths[0] != "/v1/messages" {
		t.Errorf("anthropic endpoint got %q at %q", auth, paths)
	}
	if u := end(); u.Calls != 2 || u.InputTokens != 10 || u.OutputTokens != 6 {
		t.Errorf("usage %+v", u)
	}
}

func TestRelayDirRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := New(hclog.NewNullLogger(), &counts{}, nil).Listen(link); err == nil {
		t.Error("a symlinked relay dir was accepted")
	}
}

// counts is the Metrics of a test: what the relay counted.
type counts struct {
	mu      sync.Mutex
	calls   map[string]int
	in, out int64
	refused map[string]int
	window  int64
}

func (c *counts) Relayed(outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[outcome]++
}

func (c *counts) Tokens(in, out int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.in += in
	c.out += out
}

func (c *counts) BudgetRefused(which string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused == nil {
		c.refused = map[string]int{}
	}
	c.refused[which]++
}

func (c *counts) AgentWindow(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.window = n
}

// syncBuffer is a log sink the test reads while the relay writes.
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
	return append([]byte(nil), b.buf.Bytes()...)
}
