package runner

import (
	"bufio"
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
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// postAsync submits a message with wait=false and returns the status, the
// X-Message-Id and the decoded body.
func postAsync(t *testing.T, url, token, body string) (int, string, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages?wait=false", strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("status %d body %q: %v", resp.StatusCode, raw, err)
	}
	if resp.StatusCode == http.StatusAccepted && resp.Header.Get("Location") != "/v1/messages/"+resp.Header.Get("X-Message-Id") {
		t.Errorf("202 Location %q for id %q", resp.Header.Get("Location"), resp.Header.Get("X-Message-Id"))
	}
	return resp.StatusCode, resp.Header.Get("X-Message-Id"), m
}

// poll reads GET /v1/messages/{id} once.
func poll(t *testing.T, url, token, id string) (int, AsyncStatus, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/messages/"+id, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var st AsyncStatus
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("status %d body %q: %v", resp.StatusCode, raw, err)
	}
	_ = json.Unmarshal(raw, &st)
	return resp.StatusCode, st, m
}

// pollUntil polls until id is in state.
func pollUntil(t *testing.T, url, id, state string) AsyncStatus {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, st, m := poll(t, url, "tok-123", id)
		if code != http.StatusOK {
			t.Fatalf("poll %s: %d %v", id, code, m)
		}
		if st.State == state {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stays %q, want %q", id, st.State, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func metricsText(t *testing.T, s *Server) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// A submit answers 202 and the id at once; polls show queued, then running,
// then done with the body the blocking call would have answered, error
// kinds included.
func TestAsyncSubmitPollDone(t *testing.T) {
	b := &scripted{
		answer: func(req agent.Request) (sandbox.Outcome, error) {
			if req.Message.Text == "fail" {
				return sandbox.Outcome{SandboxID: "x", ExitCode: 2, StderrTail: []byte("panic: sk-very-secret")}, nil
			}
			return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "hello " + req.Message.Text + " sk-very-secret"})
		},
		release: make(chan struct{}),
		running: make(chan struct{}, 8),
	}
	s, ts := newTestServer(t, testConfig(), b)

	code, id1, m := postAsync(t, ts.URL, "tok-123", `{"text":"one","sender":"bob"}`)
	if code != http.StatusAccepted || id1 == "" || m["message_id"] != id1 || m["state"] != StateQueued {
		t.Fatalf("submit: %d %q %v", code, id1, m)
	}
	<-b.running // message 1 holds the turn
	if st := pollUntil(t, ts.URL, id1, StateRunning); st.Status != 0 || st.Result != nil {
		t.Errorf("running with a result: %+v", st)
	}
	code, id2, _ := postAsync(t, ts.URL, "tok-123", `{"text":"fail"}`)
	if code != http.StatusAccepted || id2 == id1 {
		t.Fatalf("second submit: %d %q", code, id2)
	}
	if _, st, _ := poll(t, ts.URL, "tok-123", id2); st.State != StateQueued || st.MessageID != id2 {
		t.Errorf("second message while the first runs: %+v", st)
	}
	if n := s.metrics.queued.Load(); n != 1 {
		t.Errorf("queue depth %d, want 1", n)
	}

	b.release <- struct{}{}
	st := pollUntil(t, ts.URL, id1, StateDone)
	var reply agent.Reply
	if err := json.Unmarshal(st.Result, &reply); err != nil || st.Status != http.StatusOK ||
		reply.Reply != "hello one [REDACTED]" || reply.MessageID != id1 {
		t.Errorf("done: %+v (%v), reply %+v", st, err, reply)
	}
	<-b.running
	b.release <- struct{}{}
	st = pollUntil(t, ts.URL, id2, StateDone)
	var eb ErrorBody
	if err := json.Unmarshal(st.Result, &eb); err != nil || st.Status != http.StatusInternalServerError ||
		eb.Error.Kind != agent.ErrKindExit || eb.MessageID != id2 || bytes.Contains(st.Result, []byte("sk-very-secret")) {
		t.Errorf("error outcome: %+v %s (%v)", st, st.Result, err)
	}
	// The message is the same message the blocking call would have sent.
	if req := b.jobs[0]; req.Message.ID != id1 || req.Message.Text != "one" || req.Message.Sender != "bob" || strings.Contains(req.LLM.APIKey, "sk-very-secret") {
		t.Errorf("request %+v", req)
	}
	// A done outcome reads the same until it expires.
	if again := pollUntil(t, ts.URL, id1, StateDone); !bytes.Equal(again.Result, pollUntil(t, ts.URL, id1, StateDone).Result) {
		t.Error("a second poll differs")
	}

	text := metricsText(t, s)
	for _, want := range []string{
		"meepa_runner_async_submissions_total 2",
		"meepa_runner_async_outcomes_kept 2",
		`meepa_runner_messages_total{outcome="ok"} 1`,
		`meepa_runner_messages_total{outcome="exit"} 1`,
		"meepa_runner_queue_depth 0",
		"meepa_runner_in_flight 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

// The blocking call and its answer are the same whether or not the result
// is fetched later: an async result is byte for byte the blocking body.
func TestAsyncResultMatchesBlocking(t *testing.T) {
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: "fixed", Reply: "same", Steps: []agent.Step{{Text: "<&>"}}})
	}}
	_, ts := newTestServer(t, testConfig(), b)
	_, blocking := postRaw(t, ts.URL, "tok-123", []byte(`{"text":"x"}`))
	_, id, _ := postAsync(t, ts.URL, "tok-123", `{"text":"x"}`)
	st := pollUntil(t, ts.URL, id, StateDone)
	if want := bytes.TrimSuffix(blocking, []byte("\n")); !bytes.Equal(st.Result, want) || st.Status != http.StatusOK {
		t.Errorf("async result %s (%d), blocking %s", st.Result, st.Status, want)
	}
}

// Async submits share the blocking queue: past QueueSize both are refused
// 429 queue_full; and they are checked like blocking ones.
func TestAsyncQueueFullAndRejections(t *testing.T) {
	b := &scripted{
		answer:  func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "ok"}) },
		release: make(chan struct{}),
		running: make(chan struct{}, 8),
	}
	cfg := testConfig()
	cfg.QueueSize = 1
	cfg.MaxRequestBytes = 100
	s, ts := newTestServer(t, cfg, b)

	for name, c := range map[string]struct {
		token, body string
		code        int
		kind        string
	}{
		"no token":   {"", `{"text":"hi"}`, 401, KindUnauthorized},
		"wrong":      {"tok-124", `{"text":"hi"}`, 401, KindUnauthorized},
		"not json":   {"tok-123", `hi`, 400, KindBadRequest},
		"empty text": {"tok-123", `{"text":" "}`, 400, KindBadRequest},
		"too large":  {"tok-123", `{"text":"` + strings.Repeat("a", 200) + `"}`, 413, KindTooLarge},
	} {
		if code, id, m := postAsync(t, ts.URL, c.token, c.body); code != c.code || errKind(m) != c.kind || id != "" {
			t.Errorf("%s: %d %q %v, want %d %s", name, code, id, m, c.code, c.kind)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/messages?wait=later", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("Authorization", "Bearer tok-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("wait=later: %d", resp.StatusCode)
	}

	results := make(chan int, 1)
	go func() { c, _ := post(t, ts.URL, "tok-123", `{"text":"1"}`); results <- c }()
	<-b.running // the blocking message 1 holds the turn
	code, id2, _ := postAsync(t, ts.URL, "tok-123", `{"text":"2"}`)
	if code != http.StatusAccepted {
		t.Fatalf("async into an empty queue: %d", code)
	}
	if code, id, m := postAsync(t, ts.URL, "tok-123", `{"text":"3"}`); code != 429 || errKind(m) != KindQueueFull || id != "" {
		t.Errorf("async into a full queue: %d %q %v", code, id, m)
	}
	if code, m := post(t, ts.URL, "tok-123", `{"text":"4"}`); code != 429 || errKind(m) != KindQueueFull {
		t.Errorf("blocking behind a queued async message: %d %v", code, m)
	}
	b.release <- struct{}{}
	if c := <-results; c != 200 {
		t.Errorf("blocking message: %d", c)
	}
	<-b.running
	b.release <- struct{}{}
	pollUntil(t, ts.URL, id2, StateDone)
	var texts []string
	for _, j := range b.jobs {
		texts = append(texts, j.Message.Text)
	}
	if strings.Join(texts, ",") != "1,2" {
		t.Errorf("ran %v", texts)
	}
	text := metricsText(t, s)
	for _, want := range []string{
		`meepa_runner_messages_total{outcome="queue_full"} 2`,
		"meepa_runner_async_submissions_total 1",
		"meepa_runner_async_outcomes_kept 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

// GET needs the token, even to learn that an id is unknown; unknown ids,
// blocking messages' ids and other methods are refused with a typed body.
func TestAsyncPollAuthAndNotFound(t *testing.T) {
	b := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "ok"}) }}
	_, ts := newTestServer(t, testConfig(), b)
	_, id, _ := postAsync(t, ts.URL, "tok-123", `{"text":"hi"}`)
	pollUntil(t, ts.URL, id, StateDone)
	blockingID, _ := postRaw(t, ts.URL, "tok-123", []byte(`{"text":"hi"}`))

	for name, c := range map[string]struct {
		token, id string
		code      int
		kind      string
	}{
		"no token":          {"", id, 401, KindUnauthorized},
		"wrong token":       {"tok-124", id, 401, KindUnauthorized},
		"no token, unknown": {"", "msg-0000000000000000", 401, KindUnauthorized},
		"unknown":           {"tok-123", "msg-0000000000000000", 404, KindNotFound},
		"blocking message":  {"tok-123", blockingID, 404, KindNotFound},
		"empty id":          {"tok-123", "", 404, KindNotFound},
		"nested":            {"tok-123", id + "/x", 404, KindNotFound},
	} {
		code, st, m := poll(t, ts.URL, c.token, c.id)
		if code != c.code || errKind(m) != c.kind || st.State != "" || st.Result != nil {
			t.Errorf("%s: %d %v, want %d %s", name, code, m, c.code, c.kind)
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/messages/"+id, nil)
	req.Header.Set("Authorization", "Bearer tok-123")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodGet {
		t.Errorf("DELETE: %d", resp.StatusCode)
	}
}

// At most max finished outcomes are kept, the oldest evicted first; an
// evicted one answers 410 evicted.
func TestAsyncEvictionByCount(t *testing.T) {
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{Reply: req.Message.Text})
	}}
	s, ts := newTestServer(t, testConfig(), b)
	if s.outcomes.max != DefaultMaxOutcomes || s.outcomes.ttl != DefaultOutcomeTTL || DefaultMaxOutcomes != 1000 || DefaultOutcomeTTL != 15*time.Minute {
		t.Fatalf("defaults %d %s", s.outcomes.max, s.outcomes.ttl)
	}
	s.outcomes.max = 2
	var ids []string
	for _, text := range []string{"a", "b", "c"} {
		_, id, _ := postAsync(t, ts.URL, "tok-123", `{"text":"`+text+`"}`)
		pollUntil(t, ts.URL, id, StateDone) // one at a time: finished in order
		ids = append(ids, id)
	}
	if code, _, m := poll(t, ts.URL, "tok-123", ids[0]); code != http.StatusGone || errKind(m) != KindEvicted {
		t.Errorf("oldest outcome: %d %v, want 410 evicted", code, m)
	}
	for i, id := range ids[1:] {
		var r agent.Reply
		if st := pollUntil(t, ts.URL, id, StateDone); json.Unmarshal(st.Result, &r) != nil || r.Reply != []string{"b", "c"}[i] {
			t.Errorf("kept outcome %s: %s", id, st.Result)
		}
	}
	if text := metricsText(t, s); !strings.Contains(text, "meepa_runner_async_outcomes_kept 2\n") ||
		!strings.Contains(text, "meepa_runner_async_submissions_total 3\n") {
		t.Errorf("metrics:\n%s", text)
	}
}

// fakeClock is the outcome store's clock in the eviction-by-age test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A finished outcome is kept for ttl after it finished, then it is gone; a
// pending message never expires.
func TestAsyncEvictionByAge(t *testing.T) {
	b := &scripted{
		answer:  func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "ok"}) },
		release: make(chan struct{}),
		running: make(chan struct{}, 8),
	}
	s, ts := newTestServer(t, testConfig(), b)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.outcomes.now = clock.now

	_, old, _ := postAsync(t, ts.URL, "tok-123", `{"text":"old"}`)
	<-b.running
	b.release <- struct{}{}
	pollUntil(t, ts.URL, old, StateDone)
	clock.advance(10 * time.Minute)
	_, young, _ := postAsync(t, ts.URL, "tok-123", `{"text":"young"}`)
	<-b.running
	b.release <- struct{}{}
	pollUntil(t, ts.URL, young, StateDone)
	_, pending, _ := postAsync(t, ts.URL, "tok-123", `{"text":"pending"}`)
	<-b.running // runs, and stays running past every bound

	clock.advance(5*time.Minute - time.Nanosecond) // old is 15m - 1ns old
	pollUntil(t, ts.URL, old, StateDone)
	clock.advance(time.Nanosecond) // 15 minutes
	if code, _, m := poll(t, ts.URL, "tok-123", old); code != 404 || errKind(m) != KindNotFound {
		t.Errorf("expired outcome: %d %v", code, m)
	}
	pollUntil(t, ts.URL, young, StateDone)
	if text := metricsText(t, s); !strings.Contains(text, "meepa_runner_async_outcomes_kept 1\n") {
		t.Errorf("metrics:\n%s", text)
	}
	clock.advance(time.Hour)
	if code, _, _ := poll(t, ts.URL, "tok-123", young); code != 404 {
		t.Errorf("expired outcome: %d", code)
	}
	pollUntil(t, ts.URL, pending, StateRunning)
	if text := metricsText(t, s); !strings.Contains(text, "meepa_runner_async_outcomes_kept 0\n") {
		t.Errorf("metrics:\n%s", text)
	}
	b.release <- struct{}{}
	pollUntil(t, ts.URL, pending, StateDone)
}

// Shutdown waits for the asynchronous message in flight before it closes
// the backend, and answers a waiting one shutting_down.
func TestAsyncShutdown(t *testing.T) {
	b := &scripted{
		answer:  func(agent.Request) (sandbox.Outcome, error) { return replyOutcome(agent.Reply{Reply: "ok"}) },
		release: make(chan struct{}),
		running: make(chan struct{}, 8),
	}
	s, ts := newTestServer(t, testConfig(), b)
	_, running, _ := postAsync(t, ts.URL, "tok-123", `{"text":"1"}`)
	<-b.running
	_, waiting, _ := postAsync(t, ts.URL, "tok-123", `{"text":"2"}`)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	for !s.closing.Load() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("shutdown returned while a message ran: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !b.closed {
		t.Error("backend not closed")
	}
	// The test server is not the runner's listener: it still answers polls.
	if st := pollUntil(t, ts.URL, running, StateDone); st.Status != http.StatusOK {
		t.Errorf("message in flight: %+v", st)
	}
	st := pollUntil(t, ts.URL, waiting, StateDone)
	var eb ErrorBody
	if err := json.Unmarshal(st.Result, &eb); err != nil || st.Status != 503 || eb.Error.Kind != KindShuttingDown || eb.MessageID != waiting {
		t.Errorf("waiting message: %+v %s", st, st.Result)
	}
	if len(b.jobs) != 1 {
		t.Errorf("%d messages ran, want 1", len(b.jobs))
	}
}

// The audit line of an asynchronous message says so; a blocking one's
// says it was not.
func TestAsyncAuditLine(t *testing.T) {
	b := &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "ok"})
	}}
	logs := &syncBuffer{}
	s, err := New(context.Background(), testConfig(), Options{
		Logger: hclog.New(&hclog.LoggerOptions{Name: "agent-runner", Level: hclog.Info, JSONFormat: true, Output: logs}),
		NewBackend: func(context.Context, *agentspec.Config, *relay.Relay, hclog.Logger) (sandbox.Backend, string, error) {
			return b, backends.ModeContainer, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	blockingID, _ := postRaw(t, ts.URL, "tok-123", []byte(`{"text":"a"}`))
	_, asyncID, _ := postAsync(t, ts.URL, "tok-123", `{"text":"b"}`)
	pollUntil(t, ts.URL, asyncID, StateDone)

	want := map[string]bool{blockingID: false, asyncID: true}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line["@message"] != "message" {
			continue
		}
		id, _ := line["message_id"].(string)
		async, ok := want[id]
		if !ok || line["async"] != async || line["outcome"] != "ok" {
			t.Errorf("audit line %v", line)
		}
		seen++
	}
	if seen != 2 {
		t.Errorf("%d audit lines, want 2:\n%s", seen, logs.Bytes())
	}
}
