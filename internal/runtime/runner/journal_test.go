package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

func testJournal(t *testing.T, dir string) (*journal, []record, *syncBuffer) {
	t.Helper()
	var buf syncBuffer
	j, recs, err := openJournal(dir, hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true}))
	if err != nil {
		t.Fatal(err)
	}
	return j, recs, &buf
}

func journalFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Records come back in acceptance order with their states; a done record
// keeps the answer byte for byte and no longer the message text; files
// and directory are the runner's alone.
func TestJournalWriteReadOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j, recs, _ := testJournal(t, dir)
	if len(recs) != 0 {
		t.Fatalf("a new journal has %d records", len(recs))
	}
	var ids []string
	for i, text := range []string{"first", "second", "third", "fourth"} {
		p := &pending{id: newMessageID(), msg: MessageRequest{Text: text, Sender: "bob"}, bytesIn: 10 + i,
			async: i%2 == 0, keyHash: strings.Repeat("ab", 32), queuedAt: time.Now()}
		if err := j.accept(p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.id)
	}
	testMust(t, j.start(ids[1]))
	testMust(t, j.start(ids[2]))
	res := errorResult(http.StatusGatewayTimeout, ids[2], agent.ErrKindTimeout, `<no> "reply" & é`)
	testMust(t, finishErr(j.finish(ids[2], res, time.Now())))
	testMust(t, j.remove(ids[3]))
	if n, size := j.stats(); n != 3 || size <= 0 {
		t.Errorf("stats %d records, %d bytes", n, size)
	}

	_, recs, _ = testJournal(t, dir)
	if len(recs) != 3 {
		t.Fatalf("%d records after reopening: %+v", len(recs), recs)
	}
	for i, want := range []string{journalAccepted, journalStarted, journalDone} {
		r := recs[i]
		if r.ID != ids[i] || r.State != want || r.KeyHash == "" || r.Async != (i%2 == 0) {
			t.Errorf("record %d: %+v, want %s in state %s", i, r, ids[i], want)
		}
	}
	if recs[0].Message == nil || recs[0].Message.Text != "first" || recs[0].Message.Sender != "bob" || recs[0].BytesIn != 10 {
		t.Errorf("accepted record lost its message: %+v", recs[0])
	}
	if d := recs[2]; d.Message != nil || d.Status != http.StatusGatewayTimeout || !bytes.Equal(append([]byte(d.Body), '\n'), res.body) {
		t.Errorf("done record %+v, body %s, want %s", d, d.Body, res.body)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("journal dir mode %o", fi.Mode().Perm())
	}
	for _, name := range journalFiles(t, dir) {
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %o", name, fi.Mode().Perm())
		}
	}
	names := journalFiles(t, dir)
	if !sort.StringsAreSorted(names) || !strings.HasPrefix(names[0], "0000000000000001-") {
		t.Errorf("files %v", names)
	}

	// Numbering goes on after the highest record on disk.
	j2, _, _ := testJournal(t, dir)
	p := &pending{id: newMessageID(), msg: MessageRequest{Text: "fifth"}, queuedAt: time.Now()}
	testMust(t, j2.accept(p))
	if _, err := os.Stat(filepath.Join(dir, "0000000000000004-"+p.id+".json")); err != nil {
		t.Errorf("the next record is not numbered 4: %v (%v)", err, journalFiles(t, dir))
	}
}

// A file that is not a record is logged and set aside, never a crash; a
// temporary file a crash left is removed; the good records still load.
func TestJournalCorruptSkipped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	j, _, _ := testJournal(t, dir)
	good := &pending{id: newMessageID(), msg: MessageRequest{Text: "keep me"}, queuedAt: time.Now()}
	testMust(t, j.accept(good))
	other := newMessageID()
	bad := map[string]string{
		"0000000000000002-" + other + ".json":        `{"v":1,"seq":2,"message_id":"` + other + `","state":"accep`,
		"0000000000000003-msg-0000000000000003.json": `{"v":1,"seq":3,"message_id":"msg-0000000000000004","state":"accepted","message":{"text":"x"}}`,
		"0000000000000004-msg-0000000000000004.json": `{"v":9,"seq":4,"message_id":"msg-0000000000000004","state":"accepted","message":{"text":"x"}}`,
		"0000000000000005-msg-0000000000000005.json": `{"v":1,"seq":5,"message_id":"msg-0000000000000005","state":"done"}`,
		"0000000000000006-msg-0000000000000006.json": `{"v":1,"seq":6,"message_id":"msg-0000000000000006","state":"running","message":{"text":"x"}}`,
		"notes.txt": "hello",
	}
	for name, body := range bad {
		testMust(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600))
	}
	testMust(t, os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half"), 0o600))

	_, recs, log := testJournal(t, dir)
	if len(recs) != 1 || recs[0].ID != good.id || recs[0].Message.Text != "keep me" {
		t.Fatalf("records %+v", recs)
	}
	files := journalFiles(t, dir)
	for name := range bad {
		if !strings.Contains(string(log.Bytes()), name) {
			t.Errorf("no log line names %s:\n%s", name, string(log.Bytes()))
		}
		if _, err := os.Stat(filepath.Join(dir, name+".corrupt")); err != nil {
			t.Errorf("%s not set aside: %v", name, files)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !os.IsNotExist(err) {
		t.Errorf("leftover temporary file: %v", err)
	}
	// Set aside, they are not read (or logged) again.
	_, recs, log = testJournal(t, dir)
	if len(recs) != 1 || strings.Contains(string(log.Bytes()), "cannot be read") {
		t.Errorf("second open: %d records, log:\n%s", len(recs), string(log.Bytes()))
	}
}

// The journal directory must be a directory the runner can keep to itself.
func TestJournalOpenRefuses(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	testMust(t, os.WriteFile(file, nil, 0o600))
	if _, _, err := openJournal(file, hclog.NewNullLogger()); err == nil {
		t.Error("a file opened as the journal")
	}
	link := filepath.Join(base, "link")
	testMust(t, os.Symlink(base, link))
	if _, _, err := openJournal(link, hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a symlink opened as the journal: %v", err)
	}
	wide := filepath.Join(base, "wide")
	testMust(t, os.Mkdir(wide, 0o755))
	if _, _, err := openJournal(wide, hclog.NewNullLogger()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(wide); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %o, want 0700", fi.Mode().Perm())
	}
}

func testMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func journalConfig(dir string) *agentspec.Config {
	c := testConfig()
	c.Journal = dir
	return c
}

func newJournalServer(t *testing.T, dir string, b *scripted) (*Server, string) {
	t.Helper()
	s, ts := newTestServer(t, journalConfig(dir), b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s, ts.URL
}

// postKey sends a message with an Idempotency-Key (wait=false when async)
// and returns status, X-Message-Id, Idempotent-Replayed and body.
func postKey(t *testing.T, url, key, body string, async bool) (int, string, string, []byte) {
	t.Helper()
	u := url + "/v1/messages"
	if async {
		u += "?wait=false"
	}
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok-123")
	if key != "" {
		req.Header.Set(IdempotencyKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Message-Id"), resp.Header.Get("Idempotent-Replayed"), raw
}

func echoBackend() *scripted {
	return &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: "echo " + req.Message.Text})
	}}
}

// A repeated key answers the first message's outcome, byte for byte, with
// its id, and runs nothing; the key is per message, not per text.
func TestIdempotencyKeyRepeatDone(t *testing.T) {
	dir := t.TempDir()
	b := echoBackend()
	s, url := newJournalServer(t, dir, b)
	code, id, replayed, first := postKey(t, url, "order-42", `{"text":"one"}`, false)
	if code != 200 || replayed != "" {
		t.Fatalf("first: %d %q %s", code, replayed, first)
	}
	for _, async := range []bool{false, true} {
		code2, id2, replayed2, again := postKey(t, url, "order-42", `{"text":"something else"}`, async)
		if code2 != 200 || id2 != id || replayed2 != "true" || !bytes.Equal(again, first) {
			t.Errorf("repeat (async %v): %d %s %q %s, want %s", async, code2, id2, replayed2, again, first)
		}
	}
	if code, _, _, _ := postKey(t, url, "order-43", `{"text":"one"}`, false); code != 200 {
		t.Errorf("another key: %d", code)
	}
	if len(b.jobs) != 2 {
		t.Errorf("ran %d messages, want 2", len(b.jobs))
	}
	// Blocking messages without a key leave nothing in the journal; keyed
	// ones stay done.
	if code, _, _, _ := postKey(t, url, "", `{"text":"plain"}`, false); code != 200 {
		t.Errorf("plain: %d", code)
	}
	if n := len(journalFiles(t, dir)); n != 2 {
		t.Errorf("%d journal files, want the 2 keyed ones: %v", n, journalFiles(t, dir))
	}
	text := metricsText(t, s)
	for _, want := range []string{"meepa_runner_idempotent_replays_total 2", "meepa_runner_journal_records 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

// While the first message of a key waits or runs, an asynchronous repeat
// gets 202 with its id and a blocking repeat waits for its answer.
func TestIdempotencyKeyRepeatRunning(t *testing.T) {
	b := echoBackend()
	b.release, b.running = make(chan struct{}), make(chan struct{}, 4)
	_, url := newJournalServer(t, t.TempDir(), b)
	code, id, _, _ := postKey(t, url, "k1", `{"text":"one"}`, true)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d", code)
	}
	<-b.running
	code, id2, _, raw := postKey(t, url, "k1", `{"text":"one"}`, true)
	var st AsyncStatus
	_ = json.Unmarshal(raw, &st)
	if code != http.StatusAccepted || id2 != id || st.MessageID != id || st.State != StateRunning {
		t.Errorf("async repeat while running: %d %s %s", code, id2, raw)
	}
	type answer struct {
		code int
		id   string
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		c, i, _, body := postKey(t, url, "k1", `{"text":"one"}`, false)
		got <- answer{c, i, body}
	}()
	select {
	case a := <-got:
		t.Fatalf("a blocking repeat answered before the first was done: %+v", a)
	case <-time.After(100 * time.Millisecond):
	}
	b.release <- struct{}{}
	a := <-got
	st = pollUntil(t, url, id, StateDone)
	if a.code != 200 || a.id != id || !bytes.Equal(a.body, append(st.Result, '\n')) {
		t.Errorf("blocking repeat %d %s %s, outcome %s", a.code, a.id, a.body, st.Result)
	}
	if len(b.jobs) != 1 {
		t.Errorf("ran %d messages", len(b.jobs))
	}
}

func TestIdempotencyKeyRefused(t *testing.T) {
	b := echoBackend()
	_, url := newJournalServer(t, t.TempDir(), b)
	for name, key := range map[string]string{
		"too long":  strings.Repeat("k", MaxIdempotencyKeyLen+1),
		"not ascii": "clé",
	} {
		if code, _, _, raw := postKey(t, url, key, `{"text":"x"}`, false); code != 400 || !bytes.Contains(raw, []byte(KindBadRequest)) {
			t.Errorf("%s: %d %s", name, code, raw)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(`{"text":"x"}`))
	req.Header.Set("Authorization", "Bearer tok-123")
	req.Header.Add(IdempotencyKeyHeader, "a")
	req.Header.Add(IdempotencyKeyHeader, "b")
	resp, err := http.DefaultClient.Do(req)
	testMust(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("two keys: %d", resp.StatusCode)
	}
	// Go's client refuses control characters itself; the server does too.
	req.Header.Set(IdempotencyKeyHeader, "a\x01b")
	if _, err := idempotencyKey(req); err == nil {
		t.Error("a key with a control character")
	}
	if code, _, _, _ := postKey(t, url, strings.Repeat("k", MaxIdempotencyKeyLen), `{"text":"x"}`, false); code != 200 {
		t.Errorf("longest key: %d", code)
	}
	if len(b.jobs) != 1 {
		t.Errorf("ran %d", len(b.jobs))
	}
}

// A restarted runner runs what was accepted, in order, reports what had
// started as interrupted (never running it again), and still answers done
// outcomes by id and by key; expired ones go from disk.
func TestJournalResume(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := testJournal(t, dir)
	mk := func(text, key string, async bool) *pending {
		p := &pending{id: newMessageID(), msg: MessageRequest{Text: text}, async: async, keyHash: key, queuedAt: time.Now()}
		testMust(t, j.accept(p))
		return p
	}
	old := mk("old", "", true)
	testMust(t, j.start(old.id))
	testMust(t, finishErr(j.finish(old.id, result{status: 200, body: []byte("{\"reply\":\"x\"}\n")}, time.Now().Add(-DefaultOutcomeTTL-time.Minute))))
	done := mk("done", hashOf("kd"), false)
	testMust(t, j.start(done.id))
	doneRes := errorResult(http.StatusInternalServerError, done.id, agent.ErrKindExit, "exit 3")
	testMust(t, finishErr(j.finish(done.id, doneRes, time.Now())))
	started := mk("started", hashOf("ks"), false)
	testMust(t, j.start(started.id))
	a1, a2 := mk("a1", hashOf("k1"), false), mk("a2", "", true)

	b := echoBackend()
	s, url := newJournalServer(t, dir, b)
	for _, p := range []*pending{a1, a2} {
		st := pollUntil(t, url, p.id, StateDone)
		if !strings.Contains(string(st.Result), "echo "+p.msg.Text) {
			t.Errorf("%s: %s", p.msg.Text, st.Result)
		}
	}
	var texts []string
	for _, r := range b.jobs {
		texts = append(texts, r.Message.Text+"="+r.Message.ID)
	}
	if want := []string{"a1=" + a1.id, "a2=" + a2.id}; strings.Join(texts, ",") != strings.Join(want, ",") {
		t.Errorf("ran %v, want %v", texts, want)
	}
	st := pollUntil(t, url, started.id, StateDone)
	var eb ErrorBody
	if err := json.Unmarshal(st.Result, &eb); err != nil || st.Status != 500 || eb.Error.Kind != KindInterrupted || eb.MessageID != started.id {
		t.Errorf("started message: %+v %s", st, st.Result)
	}
	code, id, replayed, raw := postKey(t, url, "ks", `{"text":"started"}`, false)
	if code != 500 || id != started.id || replayed != "true" || !bytes.Contains(raw, []byte(KindInterrupted)) {
		t.Errorf("key of the interrupted message: %d %s %q %s", code, id, replayed, raw)
	}
	code, id, _, raw = postKey(t, url, "kd", `{"text":"done"}`, true)
	if code != 500 || id != done.id || !bytes.Equal(raw, doneRes.body) {
		t.Errorf("key of the done message: %d %s %s, want %s", code, id, raw, doneRes.body)
	}
	if c, _, _ := poll(t, url, "tok-123", old.id); c != 404 {
		t.Errorf("an expired outcome: %d", c)
	}
	if _, err := filepath.Glob(filepath.Join(dir, "*"+old.id+"*")); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+old.id+"*")); len(m) != 0 {
		t.Errorf("expired record kept: %v", m)
	}
	if len(b.jobs) != 2 {
		t.Errorf("ran %d messages, want 2", len(b.jobs))
	}
	text := metricsText(t, s)
	for _, want := range []string{"meepa_runner_resumed_total 2", "meepa_runner_interrupted_total 1", "meepa_runner_journal_records 4", "meepa_runner_queue_depth 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

func hashOf(key string) string {
	r, _ := http.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set(IdempotencyKeyHeader, key)
	h, err := idempotencyKey(r)
	if err != nil {
		panic(err)
	}
	return h
}

// A waiting blocking message whose client leaves is withdrawn: gone from
// the journal (a restart must not run it) and its key free again.
func TestJournalWithdrawOnCancel(t *testing.T) {
	dir := t.TempDir()
	b := echoBackend()
	b.release, b.running = make(chan struct{}), make(chan struct{}, 4)
	s, url := newJournalServer(t, dir, b)
	go func() { _, _, _, _ = postKey(t, url, "", `{"text":"1"}`, false) }()
	<-b.running
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(`{"text":"2"}`))
	req.Header.Set("Authorization", "Bearer tok-123")
	req.Header.Set(IdempotencyKeyHeader, "k2")
	gone := make(chan struct{})
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
		close(gone)
	}()
	for deadline := time.Now().Add(10 * time.Second); len(journalFiles(t, dir)) != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("journal %v, want two records", journalFiles(t, dir))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-gone
	for deadline := time.Now().Add(10 * time.Second); s.metrics.queued.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled message stays queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(journalFiles(t, dir)); n != 1 {
		t.Errorf("journal after the withdrawal: %v", journalFiles(t, dir))
	}
	b.release <- struct{}{}
	done := make(chan int)
	go func() { c, _, _, _ := postKey(t, url, "k2", `{"text":"2 again"}`, false); done <- c }()
	<-b.running
	b.release <- struct{}{}
	if c := <-done; c != 200 || len(b.jobs) != 2 || b.jobs[1].Message.Text != "2 again" {
		t.Errorf("the key after its withdrawal: %d, jobs %d", c, len(b.jobs))
	}
}

// A shutdown keeps queued asynchronous messages accepted in the journal,
// and the next runner runs them.
func TestJournalShutdownKeepsQueued(t *testing.T) {
	dir := t.TempDir()
	b := echoBackend()
	b.release, b.running = make(chan struct{}), make(chan struct{}, 4)
	s, ts := newTestServer(t, journalConfig(dir), b)
	code, first, _, _ := postKey(t, ts.URL, "", `{"text":"runs"}`, true)
	<-b.running
	code2, queued, _, _ := postKey(t, ts.URL, "", `{"text":"waits"}`, true)
	if code != 202 || code2 != 202 {
		t.Fatalf("submits %d %d", code, code2)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Shutdown(context.Background()) }()
	for !s.closing.Load() {
		time.Sleep(time.Millisecond)
	}
	b.release <- struct{}{}
	testMust(t, <-stopped)
	_, recs, _ := testJournal(t, dir)
	if len(recs) != 2 || recs[0].ID != first || recs[0].State != journalDone || recs[1].ID != queued || recs[1].State != journalAccepted {
		t.Fatalf("journal after shutdown: %+v", recs)
	}
	b2 := echoBackend()
	_, url := newJournalServer(t, dir, b2)
	if st := pollUntil(t, url, queued, StateDone); !strings.Contains(string(st.Result), "echo waits") {
		t.Errorf("resumed: %s", st.Result)
	}
	if st := pollUntil(t, url, first, StateDone); !strings.Contains(string(st.Result), "echo runs") {
		t.Errorf("done before the restart: %s", st.Result)
	}
}

// BenchmarkMessageJournal is the journal's cost per blocking message (an
// accepted, a started and a removed record, each synced) against no
// journal, with a backend that answers at once.
func BenchmarkMessageJournal(b *testing.B) {
	for _, name := range []string{"none", "journal", "journal+key"} {
		b.Run(name, func(b *testing.B) {
			cfg := testConfig()
			if name != "none" {
				cfg.Journal = b.TempDir()
			}
			s, err := New(context.Background(), cfg, Options{Logger: hclog.NewNullLogger(),
				NewBackend: func(context.Context, *agentspec.Config, *relay.Relay, hclog.Logger) (sandbox.Backend, string, error) {
					return echoBackend(), backends.ModeContainer, nil
				}})
			if err != nil {
				b.Fatal(err)
			}
			h := s.handler()
			b.ResetTimer()
			for i := range b.N {
				req, _ := http.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(`{"text":"x"}`))
				req.Header.Set("Authorization", "Bearer tok-123")
				if name == "journal+key" {
					req.Header.Set(IdempotencyKeyHeader, "k"+strconv.Itoa(i))
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// The audit line says whether a message was resumed and which key it had
// (a hash prefix, never the key); a repeat logs a line of its own.
func TestAuditLineResumedAndKey(t *testing.T) {
	var buf syncBuffer
	s, err := New(context.Background(), journalConfig(t.TempDir()), Options{
		Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, JSONFormat: true, Level: hclog.Trace}),
		NewBackend: func(context.Context, *agentspec.Config, *relay.Relay, hclog.Logger) (sandbox.Backend, string, error) {
			return echoBackend(), backends.ModeContainer, nil
		},
	})
	testMust(t, err)
	ts := httptest.NewServer(s.handler())
	t.Cleanup(ts.Close)
	key := "customer-secret-order-7"
	_, id, _, _ := postKey(t, ts.URL, key, `{"text":"x"}`, false)
	_, _, _, _ = postKey(t, ts.URL, key, `{"text":"x"}`, false)
	var audit, repeat map[string]any
	for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch m["@message"] {
		case "message":
			audit = m
		case "message repeated":
			repeat = m
		}
	}
	want := hashOf(key)[:12]
	if audit == nil || audit["message_id"] != id || audit["resumed"] != false || audit["idempotency_key"] != want {
		t.Errorf("audit line %v, want key %s", audit, want)
	}
	if repeat == nil || repeat["message_id"] != id || repeat["idempotency_key"] != want || repeat["state"] != StateDone {
		t.Errorf("repeat line %v", repeat)
	}
	if bytes.Contains(buf.Bytes(), []byte(key)) {
		t.Error("the key in clear in the log")
	}
}
