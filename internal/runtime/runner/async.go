package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Bounds of the kept asynchronous outcomes (see the package doc).
const (
	// DefaultOutcomeTTL is how long a finished outcome stays readable.
	DefaultOutcomeTTL = 15 * time.Minute
	// DefaultMaxOutcomes is how many finished outcomes are kept at most;
	// past it the oldest is evicted first.
	DefaultMaxOutcomes = 1000
)

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
	e, ok := s.outcomes.get(id)
	if !ok {
		writeError(w, http.StatusNotFound, "", KindNotFound, "no asynchronous message with this id (unknown, or its outcome expired)")
		return
	}
	st := AsyncStatus{MessageID: id, State: e.state}
	if e.state == StateDone {
		st.Status = e.res.status
		st.Result = bytes.TrimSuffix(e.res.body, []byte("\n"))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Message-Id", id)
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(st)
}

type asyncEntry struct {
	state    string
	res      result
	finished time.Time
	keyHash  string
	// done is closed when the message is done or withdrawn.
	done chan struct{}
}

// outcomeStore holds the kept messages (see pending.kept) by id and by
// idempotency key: the pending ones (bounded by the queue) and the
// finished ones, at most max of them and none older than ttl, evicted
// oldest first.
type outcomeStore struct {
	mu      sync.Mutex
	now     func() time.Time // the clock; tests replace it
	ttl     time.Duration
	max     int
	entries map[string]*asyncEntry
	keys    map[string]string // key hash -> message id
	done    []string          // finished ids, oldest first
	// evicted is told each finished id that is evicted (the journal drops
	// its record); it runs under the store's lock.
	evicted func(id string)
}

func newOutcomeStore() *outcomeStore {
	return &outcomeStore{now: time.Now, ttl: DefaultOutcomeTTL, max: DefaultMaxOutcomes,
		entries: map[string]*asyncEntry{}, keys: map[string]string{}}
}

func (o *outcomeStore) submit(id, keyHash string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries[id] = &asyncEntry{state: StateQueued, keyHash: keyHash, done: make(chan struct{})}
	if keyHash != "" {
		o.keys[keyHash] = id
	}
}

// load keeps an outcome that finished before this runner started.
func (o *outcomeStore) load(id, keyHash string, res result, finished time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	done := make(chan struct{})
	close(done)
	o.entries[id] = &asyncEntry{state: StateDone, res: res, finished: finished, keyHash: keyHash, done: done}
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

func (o *outcomeStore) finish(id string, res result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.entries[id]
	if !ok {
		return
	}
	if e.state == StateDone {
		return
	}
	e.state, e.res, e.finished = StateDone, res, o.now()
	close(e.done)
	o.done = append(o.done, id)
	o.pruneLocked()
}

// get returns a copy of id's entry; a finished one past its time is gone.
func (o *outcomeStore) get(id string) (asyncEntry, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	e, ok := o.entries[id]
	if !ok {
		return asyncEntry{}, false
	}
	return *e, true
}

// kept is the number of finished outcomes held.
func (o *outcomeStore) kept() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	return len(o.done)
}

// pruneLocked evicts the oldest finished outcomes past the count bound or
// the age bound. Finish times only grow along o.done (outcomes loaded at
// start come first, in finish order), so both bounds cut its front.
func (o *outcomeStore) pruneLocked() {
	now := o.now()
	n := 0
	for n < len(o.done) {
		if len(o.done)-n <= o.max && now.Sub(o.entries[o.done[n]].finished) < o.ttl {
			break
		}
		o.forgetLocked(o.done[n], o.entries[o.done[n]])
		if o.evicted != nil {
			o.evicted(o.done[n])
		}
		n++
	}
	if n > 0 {
		// A fresh slice, so that the evicted front is not held forever.
		o.done = append([]string(nil), o.done[n:]...)
	}
}
