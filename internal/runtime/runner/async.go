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

// submitAsync answers 202 with the message id of a message that already has
// its place in the queue (s.metrics.queued counts it) and runs it in the
// background when its turn comes.
func (s *Server) submitAsync(w http.ResponseWriter, msg MessageRequest, bytesIn int, queuedAt time.Time, parent string) {
	id := newMessageID()
	s.outcomes.submit(id)
	s.metrics.asyncSubmitted.Add(1)
	s.async.Add(1)
	go s.runAsync(id, msg, bytesIn, queuedAt, parent)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Message-Id", id)
	w.Header().Set("Location", "/v1/messages/"+id)
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(AsyncStatus{MessageID: id, State: StateQueued})
}

// runAsync is the blocking path's wait and run for an asynchronous message,
// whose outcome goes to s.outcomes instead of a waiting client.
func (s *Server) runAsync(id string, msg MessageRequest, bytesIn int, queuedAt time.Time, parent string) {
	defer s.async.Done()
	// No client waits, so none can give up: the message keeps its place
	// until its turn. Shutdown lets it through to the closing check below.
	s.turn <- struct{}{}
	s.metrics.queued.Add(-1)
	defer func() { <-s.turn }()
	if s.closing.Load() {
		s.outcomes.finish(id, errorResult(http.StatusServiceUnavailable, id, KindShuttingDown, "the runner is shutting down"))
		return
	}
	s.outcomes.start(id)
	s.metrics.inFlight.Add(1)
	cfg, backend, _ := s.snapshot()
	res := s.run(context.Background(), cfg, backend, id, msg, bytesIn, time.Since(queuedAt), parent, true)
	// Not running any more by the time a poll can read done.
	s.metrics.inFlight.Add(-1)
	s.outcomes.finish(id, res)
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
}

// outcomeStore holds the asynchronous messages by id: the pending ones
// (bounded by the queue) and the finished ones, at most max of them and
// none older than ttl, evicted oldest first.
type outcomeStore struct {
	mu      sync.Mutex
	now     func() time.Time // the clock; tests replace it
	ttl     time.Duration
	max     int
	entries map[string]*asyncEntry
	done    []string // finished ids, oldest first
}

func newOutcomeStore() *outcomeStore {
	return &outcomeStore{now: time.Now, ttl: DefaultOutcomeTTL, max: DefaultMaxOutcomes, entries: map[string]*asyncEntry{}}
}

func (o *outcomeStore) submit(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.entries[id] = &asyncEntry{state: StateQueued}
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
	e.state, e.res, e.finished = StateDone, res, o.now()
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
// the age bound. Finish times only grow along o.done, so both bounds cut
// its front.
func (o *outcomeStore) pruneLocked() {
	now := o.now()
	n := 0
	for n < len(o.done) {
		if len(o.done)-n <= o.max && now.Sub(o.entries[o.done[n]].finished) < o.ttl {
			break
		}
		delete(o.entries, o.done[n])
		n++
	}
	if n > 0 {
		// A fresh slice, so that the evicted front is not held forever.
		o.done = append([]string(nil), o.done[n:]...)
	}
}
