package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// finishErr is journal.finish's error alone.
func finishErr(_ *bodyRef, err error) error { return err }

func (s *scripted) runs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs)
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// heldBytes counts the outcome bodies the store holds in memory.
func (o *outcomeStore) heldBytes() (n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.entries {
		n += int64(len(e.res.body))
	}
	return n
}

func journalBytes(t *testing.T, dir string) (n int64) {
	t.Helper()
	for _, name := range journalFiles(t, dir) {
		fi, err := os.Stat(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// bigReplies is a sandbox whose every reply is about 3 MB (under the reply
// cap, as agent-run leaves it), starting with the message's text.
func bigReplies() (*scripted, func(text string) string) {
	filler := strings.Repeat("0123456789abcdef", 3_000_000/16)
	reply := func(text string) string { return text + ":" + filler }
	return &scripted{answer: func(req agent.Request) (sandbox.Outcome, error) {
		return replyOutcome(agent.Reply{MessageID: req.Message.ID, Reply: reply(req.Message.Text)})
	}}, reply
}

func replyOf(t *testing.T, raw []byte) string {
	t.Helper()
	var r agent.Reply
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("not a reply: %.200s: %v", raw, err)
	}
	return r.Reply
}

// Twenty replies of 3 MB, kept (by key, blocking and asynchronous): the
// kept outcomes stay within the byte budget in memory and, with a journal,
// on disk; with a journal the bodies are not held in memory at all but
// served from their records, in full; the ones past the budget answer 410
// evicted, by id and by key, and do not run again, also after a restart;
// and a restarted runner does not load the journal's kept outcomes into
// memory.
func TestKeptOutcomesWithinByteBudget(t *testing.T) {
	const n = 20
	for _, withJournal := range []bool{true, false} {
		t.Run(fmt.Sprintf("journal=%v", withJournal), func(t *testing.T) {
			b, want := bigReplies()
			dir := t.TempDir()
			cfg := testConfig()
			if withJournal {
				cfg.Journal = dir
			}
			base := liveHeap()
			s, ts := newTestServer(t, cfg, b)
			ids := make([]string, n)
			bodies := make([][]byte, n)
			for i := range n {
				text := fmt.Sprintf("m%02d", i)
				if i%2 == 0 {
					_, id, _, _ := postKey(t, ts.URL, "key-"+text, `{"text":"`+text+`"}`, true)
					st := pollUntil(t, ts.URL, id, StateDone)
					ids[i], bodies[i] = id, append([]byte(st.Result), '\n')
				} else {
					code, id, _, body := postKey(t, ts.URL, "key-"+text, `{"text":"`+text+`"}`, false)
					if code != http.StatusOK {
						t.Fatalf("message %d: %d %.200s", i, code, body)
					}
					ids[i], bodies[i] = id, body
				}
				if got := replyOf(t, bodies[i]); got != want(text) {
					t.Fatalf("message %d: reply of %d bytes, want %d", i, len(got), len(want(text)))
				}
			}
			clear(bodies) // the test's own copies are not the runner's
			kept, keptBytes := s.outcomes.kept()
			held, heap := s.outcomes.heldBytes(), liveHeap()-base
			t.Logf("%d outcomes kept, %d bytes counted, %d bytes held in memory; live heap grew %d MiB", kept, keptBytes, held, heap>>20)
			if keptBytes > DefaultOutcomeBytes || kept >= n {
				t.Errorf("%d outcomes of %d bytes kept, over the budget of %d bytes", kept, keptBytes, DefaultOutcomeBytes)
			}
			limit := int64(DefaultOutcomeBytes)
			if withJournal {
				// The bodies are in the journal only.
				limit = int64(kept) * inlineOutcomeBytes
			}
			if held > limit {
				t.Errorf("%d bytes of outcomes held in memory, want at most %d", held, limit)
			}
			// The slack covers what earlier tests of this process left
			// (cluster clients' buffers in CI measured 9 MiB over the held
			// bytes); unbounded outcomes grew the heap by hundreds of MiB.
			if heap > limit+16<<20 {
				t.Errorf("the live heap grew by %d bytes, want at most %d", heap, limit+16<<20)
			}
			if withJournal {
				// The budget, and the small records of what was evicted.
				if got := journalBytes(t, dir); got > DefaultOutcomeBytes+n*1024 {
					t.Errorf("the journal holds %d bytes, over the budget %d", got, DefaultOutcomeBytes)
				}
			}

			// The newest, by id and by key: whole.
			last := ids[n-1]
			st := pollUntil(t, ts.URL, last, StateDone)
			if st.Status != http.StatusOK || replyOf(t, st.Result) != want(fmt.Sprintf("m%02d", n-1)) {
				t.Errorf("GET the newest: %d, %d bytes", st.Status, len(st.Result))
			}
			code, id, replayed, body := postKey(t, ts.URL, fmt.Sprintf("key-m%02d", n-1), `{"text":"again"}`, false)
			if code != http.StatusOK || id != last || replayed != "true" || replyOf(t, body) != want(fmt.Sprintf("m%02d", n-1)) {
				t.Errorf("repeat of the newest key: %d %s replayed=%q", code, id, replayed)
			}
			// The oldest: evicted, said so by id and by key, and not run again.
			runs := b.runs()
			if code, _, m := poll(t, ts.URL, "tok-123", ids[0]); code != http.StatusGone || errKind(m) != KindEvicted {
				t.Errorf("GET the oldest: %d %q, want 410 evicted", code, errKind(m))
			}
			for _, async := range []bool{false, true} {
				if code, _, _, body := postKey(t, ts.URL, "key-m00", `{"text":"m00"}`, async); code != http.StatusGone || !bytes.Contains(body, []byte(`"kind":"evicted"`)) {
					t.Errorf("repeat of the oldest key (async %v): %d %.300s, want 410 evicted", async, code, body)
				}
			}
			if b.runs() != runs {
				t.Errorf("a repeat of an evicted key ran again")
			}
			if !withJournal {
				return
			}

			// A restart on the same journal.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			s, ts = nil, nil
			base = liveHeap()
			b2 := echoBackend()
			s2, ts2 := newTestServer(t, cfg, b2)
			heap, held = liveHeap()-base, s2.outcomes.heldBytes()
			kept2, _ := s2.outcomes.kept()
			t.Logf("after the restart: %d outcomes kept, %d bytes held, live heap grew %d KiB", kept2, held, heap>>10)
			if kept2 != kept || held > int64(kept2)*inlineOutcomeBytes || heap > 8<<20 {
				t.Errorf("the restarted runner keeps %d outcomes (was %d), holds %d bytes of them, its heap grew %d bytes",
					kept2, kept, held, heap)
			}
			st = pollUntil(t, ts2.URL, last, StateDone)
			if st.Status != http.StatusOK || replyOf(t, st.Result) != want(fmt.Sprintf("m%02d", n-1)) {
				t.Errorf("GET the newest after the restart: %d, %d bytes", st.Status, len(st.Result))
			}
			// The journal remembers what was evicted: 410 still, by id and
			// by key, and nothing runs again.
			if code, _, m := poll(t, ts2.URL, "tok-123", ids[0]); code != http.StatusGone || errKind(m) != KindEvicted {
				t.Errorf("GET the oldest after the restart: %d %q, want 410 evicted", code, errKind(m))
			}
			if code, _, _, body := postKey(t, ts2.URL, "key-m00", `{"text":"m00"}`, false); code != http.StatusGone || b2.runs() != 0 {
				t.Errorf("repeat of the oldest key after the restart: %d %.300s, %d runs; want 410 evicted and none", code, body, b2.runs())
			}
			t.Cleanup(func() { _ = s2.Shutdown(context.Background()) })
		})
	}
}

// A sandbox that writes more than the reply cap gets a protocol error
// that names the cap, not its output held.
func TestReplyOverCapRefused(t *testing.T) {
	b := &scripted{answer: func(agent.Request) (sandbox.Outcome, error) {
		return sandbox.Outcome{SandboxID: "x"}, sandbox.ErrReplyTooLarge
	}}
	_, ts := newTestServer(t, testConfig(), b)
	code, _, _, body := postKey(t, ts.URL, "", `{"text":"hi"}`, false)
	if code != http.StatusInternalServerError || !bytes.Contains(body, []byte(`"kind":"protocol"`)) ||
		!bytes.Contains(body, []byte(fmt.Sprint(agent.MaxReplyBytes))) {
		t.Errorf("%d %s", code, body)
	}
}
