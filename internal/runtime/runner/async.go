package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
)

// Bounds of the kept asynchronous outcomes (see the package doc).
const (
	// DefaultOutcomeTTL is how long a finished outcome stays readable.
	DefaultOutcomeTTL = 15 * time.Minute
	// DefaultMaxOutcomes is how many finished outcomes are kept at most;
	// past it the oldest is evicted first.
	DefaultMaxOutcomes = 1000
	// DefaultOutcomeBytes bounds the finished outcomes kept, together: the
	// size of their journal records (of their bodies without a journal).
	// Past it the oldest is evicted first. It holds at least eight replies
	// at the reply cap (agentspec.MaxReplyBytes).
	DefaultOutcomeBytes = 32 << 20
	// inlineOutcomeBytes is the largest body held in memory when the
	// journal holds it too: a larger one is read from its journal record
	// each time it is asked for. So with a journal the kept outcomes take
	// at most DefaultMaxOutcomes × inlineOutcomeBytes (8 MiB) of memory,
	// and DefaultOutcomeBytes without one.
	inlineOutcomeBytes = 8 << 10
)

// KindEvicted (410): GET /v1/messages/{id}, or a repeat of its key, for
// an outcome that was evicted before its time to keep the kept outcomes
// within their bounds. The message ran; the error says how it ended.
const KindEvicted = "evicted"

// States of an asynchronous message.
const (
	StateQueued  = "queued"
	StateRunning = "running"
	StateDone    = "done"
)

// AsyncStatus is the answer to POST /v1/messages?wait=false (202, queued)
// and to GET /v1/messages/{id}. Status and Result are set once State is
// done: the HTTP status and the JSON body that the blocking call would have
// answered (an agent.Reply, or an ErrorBody with its error kind).
type AsyncStatus struct {
	MessageID string          `json:"message_id"`
	State     string          `json:"state"`
	Status    int             `json:"status,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
}

// asyncRequested reads the wait query parameter: "false" asks for an
// asynchronous submit; absent or "true" is the blocking call.
func asyncRequested(r *http.Request) (bool, error) {
	q := r.URL.Query()
	if !q.Has("wait") {
		return false, nil
	}
	switch v := q.Get("wait"); v {
	case "true":
		return false, nil
	case "false":
		return true, nil
	default:
		return false, errors.New(`"wait" is "true" or "false"`)
	}
}

// submitAsync answers 202 with the id of p, which is accepted and has its
// place in the queue (s.metrics.queued counts it), and runs it in the
// background when its turn comes.
func (s *Server) submitAsync(w http.ResponseWriter, p *pending) {
	s.metrics.asyncSubmitted.Add(1)
	s.async.Add(1)
	go s.runAsync(p)
	writeAccepted(w, p.id, StateQueued)
}

func writeAccepted(w http.ResponseWriter, id, state string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Message-Id", id)
	w.Header().Set("Location", "/v1/messages/"+id)
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(AsyncStatus{MessageID: id, State: state})
}

// runAsync is the blocking path's wait and run for an asynchronous message,
// whose outcome goes to s.outcomes instead of a waiting client.
func (s *Server) runAsync(p *pending) {
	defer s.async.Done()
	// No client waits, so none can give up: the message keeps its place
	// until its turn. Shutdown lets it through to the closing check below.
	s.turn <- struct{}{}
	s.metrics.queued.Add(-1)
	defer func() { <-s.turn }()
	if s.closing.Load() {
		if s.journal != nil {
			// Still accepted in the journal: the next start runs it.
			return
		}
		s.settle(p, errorResult(http.StatusServiceUnavailable, p.id, KindShuttingDown, "the runner is shutting down"))
		return
	}
	s.execute(context.Background(), p)
}

// handleMessageStatus answers GET /v1/messages/{id}.
func (s *Server) handleMessageStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, "", KindBadRequest, "use GET")
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agent-runner"`)
		writeError(w, http.StatusUnauthorized, "", KindUnauthorized, "missing or wrong bearer token")
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/v1/messages/")
	e, body, err := s.outcomes.read(id)
	switch {
	case errors.Is(err, errNoOutcome):
		if t, ok := s.outcomes.evictedOutcome(id); ok {
			t.write(w, id)
			return
		}
		writeError(w, http.StatusNotFound, "", KindNotFound, "no asynchronous message with this id (unknown, or its outcome expired)")
		return
	case err != nil:
		s.log.Error("journal: read a kept outcome", "message_id", id, "error", err)
		writeError(w, http.StatusInternalServerError, id, agent.ErrKindInternal, "the kept outcome of this message cannot be read from the journal")
		return
	}
	st := AsyncStatus{MessageID: id, State: e.state}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Message-Id", id)
	if body == nil {
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(st)
		return
	}
	defer func() { _ = body.Close() }() // read-only
	// The body is copied from where it is kept, never held whole: the
	// status object's own fields, then "result" and the body.
	st.Status = e.res.status
	head, _ := json.Marshal(st) // a string, a string and an int
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(append(bytes.TrimSuffix(head, []byte("}")), `,"result":`...)); err != nil {
		return
	}
	if _, err := io.Copy(w, body); err != nil {
		s.log.Debug("outcome: client gone", "message_id", id, "error", err)
		return
	}
	_, _ = w.Write([]byte("}\n"))
}

// writeOutcome answers status and body (a kept outcome's, without its
// newline) as the blocking call did.
func writeOutcome(w http.ResponseWriter, id string, status int, body io.Reader) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Message-Id", id)
	w.WriteHeader(status)
	if _, err := io.Copy(w, body); err == nil {
		_, _ = w.Write([]byte("\n"))
	}
}

type asyncEntry struct {
	state string
	// res is the outcome once done; its body is nil when ref holds it.
	res result
	ref *bodyRef
	// size is what the outcome counts against the store's byte budget.
	size     int64
	finished time.Time
	keyHash  string
	// done is closed when the message is done or withdrawn.
	done chan struct{}
}

// bodyRef is where a journal record holds an outcome's body: n bytes at
// off of the file at path (the body without its newline). record is the
// whole file's size, what the outcome takes on disk.
type bodyRef struct {
	path   string
	off, n int64
	record int64
}

// evicted is what is left of an outcome evicted before its time: enough
// to say so to whoever asks for it, by id or by key, until its time ends.
type evicted struct {
	status  int
	keyHash string
	until   time.Time
	max     int
	budget  int64
}

// write answers 410 evicted.
func (t evicted) write(w http.ResponseWriter, id string) {
	writeError(w, http.StatusGone, id, KindEvicted, fmt.Sprintf(
		"the message ran and was answered with status %d, but its outcome was evicted to keep the kept outcomes within %d outcomes and %d bytes; "+
			"it is not run again for this key before %s", t.status, t.max, t.budget, t.until.UTC().Format(time.RFC3339)))
}

// errNoOutcome: no kept message has the id.
var errNoOutcome = errors.New("no kept outcome")

// outcomeStore holds the kept messages (see pending.kept) by id and by
// idempotency key: the pending ones (bounded by the queue) and the
// finished ones, at most max of them, budget bytes of them together and
// none older than ttl, evicted oldest first. A body over
// inlineOutcomeBytes that the journal holds is not held here but read
// from the journal when asked for. An outcome evicted before its time
// leaves a small mark (graves) that answers 410 for its id and its key
// until that time.
type outcomeStore struct {
	mu      sync.Mutex
	now     func() time.Time // the clock; tests replace it
	ttl     time.Duration
	max     int
	budget  int64
	bytes   int64 // the sizes of the finished outcomes held
	entries map[string]*asyncEntry
	keys    map[string]string // key hash -> message id (kept or evicted)
	done    []string          // finished ids, oldest first
	graves  map[string]evicted
	order   []string // the graves' ids, in eviction order (so by time)
	// evicted is told each id whose outcome or grave ends (the journal
	// drops its record), buried each id evicted before its time (the
	// journal keeps that it was); they run under the store's lock.
	evicted func(id string)
	buried  func(id string, t evicted, finished time.Time)
}

func newOutcomeStore() *outcomeStore {
	return &outcomeStore{now: time.Now, ttl: DefaultOutcomeTTL, max: DefaultMaxOutcomes, budget: DefaultOutcomeBytes,
		entries: map[string]*asyncEntry{}, keys: map[string]string{}, graves: map[string]evicted{}}
}

// keepLocked makes res (at ref in the journal, or nil) e's outcome: a
// body the journal holds stays there unless it is small.
func (o *outcomeStore) keepLocked(e *asyncEntry, res result, ref *bodyRef) {
	e.res, e.ref, e.size = res, nil, int64(len(res.body))
	if ref != nil {
		e.size = ref.record
		if res.body == nil || len(res.body) > inlineOutcomeBytes {
			e.res.body, e.ref = nil, ref
		}
	}
	o.bytes += e.size
}

func (o *outcomeStore) submit(id, keyHash string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries[id] = &asyncEntry{state: StateQueued, keyHash: keyHash, done: make(chan struct{})}
	if keyHash != "" {
		o.keys[keyHash] = id
	}
}

// load keeps an outcome that finished before this runner started (or was
// settled as it started): res, whose body may be nil when ref holds it.
func (o *outcomeStore) load(id, keyHash string, res result, ref *bodyRef, finished time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	done := make(chan struct{})
	close(done)
	e := &asyncEntry{state: StateDone, finished: finished, keyHash: keyHash, done: done}
	o.keepLocked(e, res, ref)
	o.entries[id] = e
	if keyHash != "" {
		o.keys[keyHash] = id
	}
	o.done = append(o.done, id)
	o.pruneLocked()
}

// byKey is the id of the kept message with this key hash.
func (o *outcomeStore) byKey(keyHash string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	id, ok := o.keys[keyHash]
	return id, ok
}

// remove forgets a message that was withdrawn before it ran; whoever waits
// for it finds it gone.
func (o *outcomeStore) remove(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.entries[id]
	if !ok || e.state == StateDone {
		return
	}
	o.forgetLocked(id, e)
	close(e.done)
}

func (o *outcomeStore) forgetLocked(id string, e *asyncEntry) {
	delete(o.entries, id)
	if e.keyHash != "" && o.keys[e.keyHash] == id {
		delete(o.keys, e.keyHash)
	}
}

func (o *outcomeStore) start(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.entries[id]; ok {
		e.state = StateRunning
	}
}

// finish settles id with res, which the journal holds at ref (nil: only
// here).
func (o *outcomeStore) finish(id string, res result, ref *bodyRef) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.entries[id]
	if !ok {
		return
	}
	if e.state == StateDone {
		return
	}
	e.state, e.finished = StateDone, o.now()
	o.keepLocked(e, res, ref)
	close(e.done)
	o.done = append(o.done, id)
	o.pruneLocked()
}

// read is get with, once the message is done, a reader of its body
// (without its newline) that the caller closes; errNoOutcome when id is
// not kept. A body in the journal is opened under the lock, before an
// eviction could remove its file (an open file stays readable).
func (o *outcomeStore) read(id string) (asyncEntry, io.ReadCloser, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	e, ok := o.entries[id]
	switch {
	case !ok:
		return asyncEntry{}, nil, errNoOutcome
	case e.state != StateDone:
		return *e, nil, nil
	case e.ref == nil:
		return *e, io.NopCloser(bytes.NewReader(bytes.TrimSuffix(e.res.body, []byte("\n")))), nil
	}
	f, err := os.Open(e.ref.path)
	if err != nil {
		return *e, nil, err
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != e.ref.record {
		_ = f.Close() // read-only
		return *e, nil, fmt.Errorf("%s changed under the runner (%w)", e.ref.path, err)
	}
	return *e, struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, e.ref.off, e.ref.n), f}, nil
}

// evictedOutcome is what is left of id if it was evicted before its time.
func (o *outcomeStore) evictedOutcome(id string) (evicted, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	t, ok := o.graves[id]
	return t, ok
}

// kept is the number of finished outcomes held, and their size.
func (o *outcomeStore) kept() (int, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	return len(o.done), o.bytes
}

// pruneLocked evicts the oldest finished outcomes past the count bound,
// the byte budget or the age bound. Finish times only grow along o.done
// (outcomes loaded at start come first, in finish order), so every bound
// cuts its front. One evicted before its time is buried.
func (o *outcomeStore) pruneLocked() {
	now := o.now()
	n := 0
	for n < len(o.done) {
		id := o.done[n]
		e := o.entries[id]
		expired := now.Sub(e.finished) >= o.ttl
		if !expired && len(o.done)-n <= o.max && o.bytes <= o.budget {
			break
		}
		o.forgetLocked(id, e)
		o.bytes -= e.size
		switch {
		case !expired:
			t := o.buryLocked(id, e.keyHash, e.res.status, e.finished)
			if o.buried != nil {
				o.buried(id, t, e.finished)
			}
		case o.evicted != nil:
			o.evicted(id)
		}
		n++
	}
	if n > 0 {
		// A fresh slice, so that the evicted front is not held forever.
		o.done = append([]string(nil), o.done[n:]...)
	}
	// The graves end with the time their outcomes would have had, and are
	// no more than the outcomes kept.
	n = 0
	for n < len(o.order) {
		id := o.order[n]
		t := o.graves[id]
		if len(o.order)-n <= o.max && now.Before(t.until) {
			break
		}
		delete(o.graves, id)
		if t.keyHash != "" && o.keys[t.keyHash] == id {
			delete(o.keys, t.keyHash)
		}
		if o.evicted != nil {
			o.evicted(id)
		}
		n++
	}
	if n > 0 {
		o.order = append([]string(nil), o.order[n:]...)
	}
}

// buryLocked leaves the grave of id, which finished with status.
func (o *outcomeStore) buryLocked(id, keyHash string, status int, finished time.Time) evicted {
	t := evicted{status: status, keyHash: keyHash, until: finished.Add(o.ttl), max: o.max, budget: o.budget}
	o.graves[id] = t
	o.order = append(o.order, id)
	if keyHash != "" {
		// The key stays taken: its message ran, and must not run again
		// only because its outcome could not be kept.
		o.keys[keyHash] = id
	}
	return t
}

// loadGrave keeps the grave of an outcome evicted before this runner
// started. Graves are loaded before the outcomes, in finish order.
func (o *outcomeStore) loadGrave(id, keyHash string, status int, finished time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buryLocked(id, keyHash, status, finished)
	o.pruneLocked()
}
