package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

// scripted is a Backend for the HTTP layer's unit tests: it answers what
// the test says and records the requests it got. The real Docker backend is
// exercised by the Docker tests.
type scripted struct {
	mu      sync.Mutex
	jobs    []agent.Request
	answer  func(req agent.Request) (sandbox.Outcome, error)
	release chan struct{} // when set, Run waits for it
	running chan struct{} // when set, Run signals it has started
	closed  bool
}

func (s *scripted) Run(ctx context.Context, job sandbox.Job) (sandbox.Outcome, error) {
	var req agent.Request
	if err := json.Unmarshal(job.Stdin, &req); err != nil {
		return sandbox.Outcome{}, err
	}
	s.mu.Lock()
	s.jobs = append(s.jobs, req)
	s.mu.Unlock()
	if s.running != nil {
		s.running <- struct{}{}
	}
	if s.release != nil {
		<-s.release
	}
	return s.answer(req)
}
func (s *scripted) Ready() bool                     { return true }
func (s *scripted) RelayLink() sandbox.RelayLink    { return sandbox.RelayMounted }
func (s *scripted) Close(ctx context.Context) error { s.closed = true; return nil }
func (s *scripted) Health() map[string]any          { return map[string]any{"landlock_abi": 7} }

func replyOutcome(r agent.Reply) (sandbox.Outcome, error) {
	raw, _ := json.Marshal(r)
	return sandbox.Outcome{SandboxID: "c0ffee", Stdout: append(raw, '\n')}, nil
}

func testConfig() *agentspec.Config {
	return &agentspec.Config{
		AgentID: "a1", Workspace: "/srv/a1", Listen: "127.0.0.1:0", Token: "tok-123",
		Container: agentspec.ContainerMode{Enabled: true, Image: "img", TimeoutSeconds: 7},
		LLM:       agentspec.LLMConfig{Provider: "offline", APIKey: "sk-very-secret"},
		Secrets:   map[string]string{"GH": "ghp_alsosecret"}, RedactSecrets: true,
	}
}

// handler is the server's mux without a listener: tests drive it through
// httptest, which also lets them send a request after Shutdown has closed
// the real listener.
func (s *Server) handler() http.Handler { return s.http.Handler }

func newTestServer(t *testing.T, cfg *agentspec.Config, b *scripted) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(context.Background(), cfg, Options{
		Logger:     hclog.NewNullLogger(),
		NewBackend: scriptedBackend(b),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.handler())
	t.Cleanup(ts.Close)
	return s, ts
}

// scriptedBackend makes b as NewBackend makes a container-mode backend:
// with the relay's socket listening in RelayDir when the config's messages
// use the relay.
func scriptedBackend(b *scripted) BackendFactory {
	return func(_ context.Context, cfg *agentspec.Config, r *relay.Relay, _ hclog.Logger) (sandbox.Backend, string, error) {
		if agentspec.NeedsRelay(cfg) {
			if _, err := r.ListenIn(backends.RelayDir(cfg)); err != nil {
				return nil, backends.ModeContainer, err
			}
		}
		return b, backends.ModeContainer, nil
	}
}

func post(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("status %d body %q: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, m
}

func errKind(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	k, _ := e["kind"].(string)
	return k
}

// The key never travels: an offline agent that holds one gets a relay
// token instead (the relay scrubs the workspace's writes of the key).
func TestMessageRoundTripBuildsRequestAndRedacts(t *testing.T) {
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "key is sk-very-secret and ghp_alsosecret",
			Steps: []agent.Step{{ToolCalls: []agent.ToolCall{{Name: "shell", Output: "sk-very-secret"}}}}})
	}}
	_, ts := newTestServer(t, testConfig(), b)
	code, m := post(t, ts.URL, "tok-123", `{"text":"hi","sender":"bob","channel":"c","conversation_id":"k"}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, m)
	}
	if m["reply"] != "key is [REDACTED] and [REDACTED]" {
		t.Errorf("reply not redacted: %v", m["reply"])
	}
	if raw, _ := json.Marshal(m); bytes.Contains(raw, []byte("sk-very-secret")) {
		t.Errorf("secret in answer: %s", raw)
	}
	req := b.jobs[0]
	if raw, _ := json.Marshal(req); bytes.Contains(raw, []byte("ghp_alsosecret")) {
		t.Errorf("a secret reached the sandbox's request: %s", raw)
	}
	if req.Message.Text != "hi" || req.Message.Sender != "bob" || req.Message.Channel != "c" || req.Message.ConversationID != "k" ||
		req.AgentID != "a1" || !strings.HasPrefix(req.LLM.APIKey, "meepa-relay-") || req.Relay == nil || !req.RedactSecrets ||
		!strings.HasPrefix(req.Message.ID, "msg-") || m["message_id"] != req.Message.ID {
		t.Errorf("request %+v, answer id %v", req, m["message_id"])
	}
}

func TestMessageRejections(t *testing.T) {
	b := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "x"}) }}
	cfg := testConfig()
	cfg.MaxRequestBytes = 100
	_, ts := newTestServer(t, cfg, b)
	for name, c := range map[string]struct {
		token, body string
		code        int
		kind        string
	}{
		"no token":    {"", `{"text":"hi"}`, 401, KindUnauthorized},
		"wrong token": {"tok-124", `{"text":"hi"}`, 401, KindUnauthorized},
		"prefix":      {"tok-12", `{"text":"hi"}`, 401, KindUnauthorized},
		"not json":    {"tok-123", `hi`, 400, KindBadRequest},
		"empty text":  {"tok-123", `{"text":"  "}`, 400, KindBadRequest},
		"too large":   {"tok-123", `{"text":"` + strings.Repeat("a", 200) + `"}`, 413, KindTooLarge},
	} {
		code, m := post(t, ts.URL, c.token, c.body)
		if code != c.code || errKind(m) != c.kind {
			t.Errorf("%s: %d %v, want %d %s", name, code, m, c.code, c.kind)
		}
	}
	if len(b.jobs) != 0 {
		t.Errorf("rejected requests reached the sandbox: %d", len(b.jobs))
	}
	resp, err := http.Get(ts.URL + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", resp.StatusCode)
	}
}

func TestOutcomeClassification(t *testing.T) {
	for name, c := range map[string]struct {
		out  sandbox.Outcome
		err  error
		code int
		kind string
	}{
		"timeout":   {sandbox.Outcome{SandboxID: "x", TimedOut: true, ExitCode: 137}, nil, 504, agent.ErrKindTimeout},
		"oom":       {sandbox.Outcome{SandboxID: "x", OOMKilled: true, ExitCode: 137}, nil, 500, agent.ErrKindOOM},
		"exit":      {sandbox.Outcome{SandboxID: "x", ExitCode: 2, StderrTail: []byte("panic: sk-very-secret")}, nil, 500, agent.ErrKindExit},
		"protocol":  {sandbox.Outcome{SandboxID: "x", Stdout: []byte("hello")}, nil, 500, agent.ErrKindProtocol},
		"two docs":  {sandbox.Outcome{SandboxID: "x", Stdout: []byte(`{"reply":"a"}{"reply":"b"}`)}, nil, 500, agent.ErrKindProtocol},
		"sandbox":   {sandbox.Outcome{}, io.ErrUnexpectedEOF, 500, agent.ErrKindSandbox},
		"llm":       {sandbox.Outcome{SandboxID: "x", Stdout: []byte(`{"reply":"","error_kind":"llm","error":"401 from sk-very-secret"}`)}, nil, 500, agent.ErrKindLLM},
		"workspace": {sandbox.Outcome{SandboxID: "x", Stdout: []byte(`{"reply":"","error_kind":"workspace","error":"read-only"}`)}, nil, 500, agent.ErrKindWorkspace},
		// Kinds only the runner sets cannot come from inside the sandbox.
		"fake oom":     {sandbox.Outcome{SandboxID: "x", Stdout: []byte(`{"reply":"","error_kind":"oom","error":"sk-very-secret"}`)}, nil, 500, agent.ErrKindProtocol},
		"made-up kind": {sandbox.Outcome{SandboxID: "x", Stdout: []byte(`{"reply":"","error_kind":"x\ny","error":"e"}`)}, nil, 500, agent.ErrKindProtocol},
	} {
		b := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) { return c.out, c.err }}
		_, ts := newTestServer(t, testConfig(), b)
		code, m := post(t, ts.URL, "tok-123", `{"text":"hi"}`)
		if code != c.code || errKind(m) != c.kind {
			t.Errorf("%s: %d %v, want %d %s", name, code, m, c.code, c.kind)
		}
		if raw, _ := json.Marshal(m); bytes.Contains(raw, []byte("sk-very-secret")) {
			t.Errorf("%s: secret in error: %s", name, raw)
		}
	}
}

// The turn admits one message at a time; past QueueSize waiting messages
// the answer is 429; a client that gives up leaves the queue.
func TestQueueBoundAndCancel(t *testing.T) {
	b := &scripted{
		answer:  func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "ok"}) },
		release: make(chan struct{}),
		running: make(chan struct{}, 8),
	}
	cfg := testConfig()
	cfg.QueueSize = 1
	s, ts := newTestServer(t, cfg, b)

	results := make(chan int, 4)
	go func() { c, _ := post(t, ts.URL, "tok-123", `{"text":"1"}`); results <- c }()
	<-b.running // message 1 holds the turn
	waitQueued := func(n int64) {
		for deadline := time.Now().Add(10 * time.Second); s.metrics.queued.Load() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("queue depth %d, want %d", s.metrics.queued.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// A waiting message that gives up leaves the queue...
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/messages", strings.NewReader(`{"text":"2"}`))
	req.Header.Set("Authorization", "Bearer tok-123")
	gone := make(chan struct{})
	go func() {
		// Cancelled below: the error is the point.
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
		close(gone)
	}()
	waitQueued(1)
	if code, m := post(t, ts.URL, "tok-123", `{"text":"3"}`); code != 429 || errKind(m) != KindQueueFull {
		t.Errorf("queue full: %d %v", code, m)
	}
	cancel()
	<-gone
	waitQueued(0)
	// ...so the next one fits.
	go func() { c, _ := post(t, ts.URL, "tok-123", `{"text":"4"}`); results <- c }()
	waitQueued(1)
	b.release <- struct{}{}
	<-b.running
	b.release <- struct{}{}
	if a, c := <-results, <-results; a != 200 || c != 200 {
		t.Errorf("statuses %d %d", a, c)
	}
	texts := []string{}
	for _, j := range b.jobs {
		texts = append(texts, j.Message.Text)
	}
	if strings.Join(texts, ",") != "1,4" {
		t.Errorf("ran %v, want the cancelled message skipped", texts)
	}

	rec := httptest.NewRecorder()
	s.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`meepa_runner_messages_total{outcome="ok"} 2`,
		`meepa_runner_messages_total{outcome="queue_full"} 1`,
		`meepa_runner_messages_total{outcome="cancelled"} 1`,
		`meepa_runner_message_duration_seconds_count 2`,
		`meepa_runner_container_start_seconds_bucket{le="+Inf"} 2`,
		"meepa_runner_queue_depth 0",
		"meepa_runner_ooms_total 0",
		"meepa_runner_timeouts_total 0",
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, rec.Body.String())
		}
	}
}

func TestHealthzAndShutdown(t *testing.T) {
	b := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "ok"}) }}
	s, ts := newTestServer(t, testConfig(), b)
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	testutil.Must(t, json.NewDecoder(resp.Body).Decode(&h))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || h["ok"] != true || h["agent_id"] != "a1" || h["mode"] != "container" || h["ready"] != true || h["landlock_abi"] != 7.0 ||
		h["version"] != version.Version || h["commit"] != version.Commit {
		t.Errorf("healthz %d %v", resp.StatusCode, h)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !b.closed {
		t.Error("shutdown did not close the backend (the prestarted container would leak)")
	}
	if code, m := post(t, ts.URL, "tok-123", `{"text":"hi"}`); code != 503 || errKind(m) != KindShuttingDown {
		t.Errorf("after shutdown: %d %v", code, m)
	}
}

func TestParseConfigPrestartDefault(t *testing.T) {
	c, err := agentspec.ParseConfig([]byte(`{"agent_id":"a","container_mode":{"enabled":true}}`))
	if err != nil || !c.Container.Prestart {
		t.Errorf("absent prestart: %v %v, want on", c.Container.Prestart, err)
	}
	c, err = agentspec.ParseConfig([]byte(`{"agent_id":"a","container_mode":{"enabled":true,"prestart":false}}`))
	if err != nil || c.Container.Prestart {
		t.Errorf("prestart false: %v %v", c.Container.Prestart, err)
	}
}

func TestHostModeFailsClosed(t *testing.T) {
	cfg := testConfig()
	cfg.Container.Enabled = false
	// Without container mode the only acceptable backends are the host
	// sandbox or none at all: never a container, never nothing silently.
	s, err := New(context.Background(), cfg, Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		return
	}
	defer func() {
		if err := s.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if _, _, mode := s.snapshot(); mode != backends.ModeHost {
		t.Fatalf("container mode off ran in mode %q", mode)
	}
}

// Reload waits for the turn, closes the old backend (discarding its
// prestarted sandbox) and runs the next message on the new config.
func TestReloadSwapsBackend(t *testing.T) {
	old := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "old"}) }}
	next := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "new"}) }}
	queue := []*scripted{old, next}
	s, err := New(context.Background(), testConfig(), Options{
		Logger: hclog.NewNullLogger(),
		NewBackend: func(context.Context, *agentspec.Config, *relay.Relay, hclog.Logger) (sandbox.Backend, string, error) {
			b := queue[0]
			queue = queue[1:]
			return b, backends.ModeContainer, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	if _, m := post(t, ts.URL, "tok-123", `{"text":"a"}`); m["reply"] != "old" {
		t.Fatalf("before reload: %v", m)
	}
	cfg := testConfig()
	cfg.Token = "tok-456"
	cfg.LLM.Model = "m2"
	if err := s.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if !old.closed {
		t.Error("old backend not closed")
	}
	if code, _ := post(t, ts.URL, "tok-123", `{"text":"b"}`); code != 401 {
		t.Errorf("old token after reload: %d", code)
	}
	if _, m := post(t, ts.URL, "tok-456", `{"text":"c"}`); m["reply"] != "new" || next.jobs[0].LLM.Model != "m2" {
		t.Errorf("after reload: %v", m)
	}
}

// The runner's own pass catches a secret in the spelling tool inputs carry
// (JSON-escaped) and never shows a piece of one that the stderr cut split.
func TestRedactionEscapedAndCut(t *testing.T) {
	cfg := testConfig()
	cfg.Secrets["Q"] = `pa"ss\word`
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "done",
			Steps: []agent.Step{{ToolCalls: []agent.ToolCall{{Name: "shell", Input: `{"command":"echo pa\"ss\\word"}`}}}}})
	}}
	_, ts := newTestServer(t, cfg, b)
	code, m := post(t, ts.URL, "tok-123", `{"text":"hi"}`)
	raw, _ := json.Marshal(m)
	if code != 200 || bytes.Contains(raw, []byte(`ss\\\\word`)) || !bytes.Contains(raw, []byte(redact.Redacted)) {
		t.Errorf("escaped secret in a tool input: %d %s", code, raw)
	}

	// 522 bytes: the last 512 begin inside the API key.
	stderr := "panic: sk-very-secret" + strings.Repeat("y", 501)
	b = &scripted{answer: func(agent.Request) (sandbox.Outcome, error) {
		return sandbox.Outcome{SandboxID: "x", ExitCode: 2, StderrTail: []byte(stderr)}, nil
	}}
	_, ts = newTestServer(t, testConfig(), b)
	code, m = post(t, ts.URL, "tok-123", `{"text":"hi"}`)
	raw, _ = json.Marshal(m)
	if code != 500 || errKind(m) != agent.ErrKindExit || bytes.Contains(raw, []byte("secret")) || !bytes.Contains(raw, []byte("yyyy")) {
		t.Errorf("cut stderr: %d %s", code, raw)
	}
}
