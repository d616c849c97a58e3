package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
)

// IdempotencyKeyHeader names the caller's key for a message: a repeated
// key returns the first message's outcome instead of running it again.
const IdempotencyKeyHeader = "Idempotency-Key"

// MaxIdempotencyKeyLen bounds an Idempotency-Key.
const MaxIdempotencyKeyLen = 255

// More error kinds of the HTTP API.
const (
	// KindInterrupted (500): the runner stopped (crash, kill, restart)
	// while the message ran; it may have had effects and is not run again.
	KindInterrupted = "interrupted"
	// KindJournal (503): the runner could not record the message in its
	// journal, so it did not take it (or did not start it).
	KindJournal = "journal"
)

// pending is an accepted message on its way to its turn.
type pending struct {
	id       string
	msg      MessageRequest
	bytesIn  int
	parent   string
	async    bool
	keyHash  string // sha256 of the Idempotency-Key, hex; "" without one
	resumed  bool   // accepted before this runner started
	queuedAt time.Time
	// turnHeld: the agent was idle when p was accepted, so p took the turn
	// at once and its first journal record already says started.
	turnHeld bool
}

// kept says the outcome is kept for GET /v1/messages/{id} and for repeats
// of its key: an asynchronous (or resumed) message, or one with a key. A
// blocking message without a key has nobody to ask for it again.
func (p *pending) kept() bool { return p.async || p.keyHash != "" }

// keyLabel is what the audit line shows of the key: a prefix of its hash.
func (p *pending) keyLabel() string {
	if p.keyHash == "" {
		return ""
	}
	return p.keyHash[:12]
}

// auditFields are the audit line's fields on how the message came: never
// its text, and of its key only a prefix of the hash.
func (p *pending) auditFields() []any {
	return []any{"bytes_in", p.bytesIn, "parent_message_id", p.parent,
		"async", p.async, "resumed", p.resumed, "idempotency_key", p.keyLabel()}
}

// idempotencyKey reads the Idempotency-Key header: at most one, 1 to
// MaxIdempotencyKeyLen printable ASCII characters. It returns the key's
// hash, which is all the runner keeps of it.
func idempotencyKey(r *http.Request) (string, error) {
	vals := r.Header.Values(IdempotencyKeyHeader)
	switch {
	case len(vals) == 0:
		return "", nil
	case len(vals) > 1:
		return "", errors.New("more than one Idempotency-Key header")
	}
	k := vals[0]
	if k == "" || len(k) > MaxIdempotencyKeyLen {
		return "", fmt.Errorf("Idempotency-Key must have 1 to %d characters", MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", errors.New("Idempotency-Key must be printable ASCII")
		}
	}
	sum := sha256.Sum256([]byte(k))
	return hex.EncodeToString(sum[:]), nil
}

// refusal is an answer to a message that was not accepted.
type refusal struct {
	status     int
	kind, text string
}

// admit accepts p, or finds the first message of p's key, or refuses p.
// An accepted p has its id, its place in the queue, and its journal
// record on disk; first is the id of the key's first message instead.
func (s *Server) admit(p *pending, queueSize int) (first string, ref *refusal) {
	// One at a time: a key is looked up and taken atomically, and the
	// journal numbers messages in the order they are acknowledged.
	s.acceptMu.Lock()
	defer s.acceptMu.Unlock()
	if p.keyHash != "" {
		if id, ok := s.outcomes.byKey(p.keyHash); ok {
			return id, nil
		}
	}
	if s.closing.Load() {
		return "", &refusal{http.StatusServiceUnavailable, KindShuttingDown, "the runner is shutting down"}
	}
	if s.metrics.queued.Add(1) > int64(queueSize) {
		s.metrics.queued.Add(-1)
		s.metrics.rejected(KindQueueFull)
		return "", &refusal{http.StatusTooManyRequests, KindQueueFull, fmt.Sprintf("%d messages already wait for this agent", queueSize)}
	}
	p.id, p.queuedAt = newMessageID(), time.Now()
	if !p.async {
		select {
		case s.turn <- struct{}{}:
			// Nobody waits (a waiting sender would have had the slot): p
			// runs now, and one journal write says accepted and started.
			p.turnHeld = true
		default:
		}
	}
	if err := s.journal.accept(p); err != nil {
		if p.turnHeld {
			<-s.turn
		}
		s.metrics.queued.Add(-1)
		s.metrics.rejected(KindJournal)
		s.log.Error("journal: message not accepted", "error", err)
		return "", &refusal{http.StatusServiceUnavailable, KindJournal, "the runner could not record the message, so it did not take it"}
	}
	if p.kept() {
		s.outcomes.submit(p.id, p.keyHash)
	}
	return "", nil
}

// answerRepeat answers a message whose key's first message is first: its
// outcome when done; else an asynchronous repeat gets 202 with first's id
// and a blocking one waits for it. false: first was withdrawn or evicted
// meanwhile, and the message is to be admitted afresh.
func (s *Server) answerRepeat(w http.ResponseWriter, r *http.Request, p *pending, first string) bool {
	e, body, err := s.outcomes.read(first)
	if err != nil {
		return s.answerLost(w, p, first, err)
	}
	s.metrics.replayed.Add(1)
	s.log.Info("message repeated", "message_id", first, "idempotency_key", p.keyLabel(), "state", e.state, "async", p.async)
	if e.state != StateDone && p.async {
		writeAccepted(w, first, e.state)
		return true
	}
	if e.state != StateDone {
		select {
		case <-e.done:
		case <-r.Context().Done():
			return true
		}
		if e, body, err = s.outcomes.read(first); err != nil {
			return s.answerLost(w, p, first, err)
		}
		if e.state != StateDone {
			return false
		}
	}
	defer func() { _ = body.Close() }() // read-only
	w.Header().Set("Idempotent-Replayed", "true")
	writeOutcome(w, first, e.res.status, body)
	return true
}

// answerLost answers a repeat of the key of first, whose outcome cannot be
// read: 410 when it was evicted (it ran: it does not run again), 500 when
// its journal record cannot be read; false when first is not kept (it was
// withdrawn, or its time is over), so the message is admitted afresh.
func (s *Server) answerLost(w http.ResponseWriter, p *pending, first string, err error) bool {
	if errors.Is(err, errNoOutcome) {
		t, ok := s.outcomes.evictedOutcome(first)
		if ok {
			s.log.Info("message repeated after its outcome was evicted", "message_id", first, "idempotency_key", p.keyLabel())
			t.write(w, first)
		}
		return ok
	}
	s.log.Error("journal: read a kept outcome", "message_id", first, "error", err)
	writeError(w, http.StatusInternalServerError, first, agent.ErrKindInternal, "the kept outcome of this message cannot be read from the journal")
	return true
}

// execute runs p in the turn the caller holds. The journal says started
// before any sandbox sees the message, and done with its answer after.
func (s *Server) execute(ctx context.Context, p *pending) result {
	if p.turnHeld {
		p.turnHeld = false // written so by accept
	} else if err := s.journal.start(p.id); err != nil {
		s.log.Error("journal: message not started", "message_id", p.id, "error", err)
		res := errorResult(http.StatusServiceUnavailable, p.id, KindJournal, "the runner could not record that the message starts, so it did not run it")
		s.metrics.rejected(KindJournal)
		s.settle(p, res)
		return res
	}
	s.outcomes.start(p.id)
	s.metrics.inFlight.Add(1)
	cfg, backend, _ := s.snapshot()
	res := s.run(ctx, cfg, backend, p)
	// Not running any more by the time a poll can read done.
	s.metrics.inFlight.Add(-1)
	s.settle(p, res)
	return res
}

// settle records p's answer where it is kept, and forgets a blocking
// message without a key, whose caller gets the answer now.
func (s *Server) settle(p *pending, res result) {
	if !p.kept() {
		// Not synced: should a crash bring the record back, it is only
		// reported interrupted, to nobody (no key, and the caller had its
		// answer or lost its connection); it never runs again.
		if err := s.journal.forget(p.id); err != nil {
			s.log.Error("journal: remove an answered message", "message_id", p.id, "error", err)
		}
		return
	}
	ref, err := s.journal.finish(p.id, res, time.Now())
	if err != nil {
		s.log.Error("journal: record an outcome", "message_id", p.id, "error", err)
	}
	s.outcomes.finish(p.id, res, ref)
}

// withdraw takes back a blocking message that never ran (its caller left,
// or the runner is shutting down): the caller knows it did not run, so it
// must not run after a restart either, and its key is free again.
func (s *Server) withdraw(p *pending) {
	if err := s.journal.remove(p.id); err != nil {
		s.log.Error("journal: withdraw a message", "message_id", p.id, "error", err)
	}
	s.outcomes.remove(p.id)
}

// resume takes up the journal a previous runner left: done outcomes are
// kept again, a message that had started is reported interrupted (it may
// have had effects; it never runs twice), and accepted ones run in their
// order, asynchronously, before any message that comes after.
func (s *Server) resume(recs []record) {
	var queue []*pending
	var done, started []record
	for _, r := range recs {
		switch r.State {
		case journalDone:
			done = append(done, r)
		case journalStarted:
			started = append(started, r)
		case journalAccepted:
			p := &pending{id: r.ID, msg: *r.Message, bytesIn: r.BytesIn, parent: r.Parent, async: true,
				keyHash: r.KeyHash, resumed: true, queuedAt: r.Accepted}
			s.outcomes.submit(p.id, p.keyHash)
			s.metrics.queued.Add(1)
			s.metrics.resumed.Add(1)
			queue = append(queue, p)
		}
	}
	// The store keeps finished outcomes in finish order: the old ones
	// first, then those finished now; the graves of evicted ones likewise,
	// before any evicted now.
	sortByFinish(done)
	for _, r := range done {
		if r.Evicted {
			s.outcomes.loadGrave(r.ID, r.KeyHash, r.Status, *r.Finished)
		}
	}
	for _, r := range done {
		if r.Evicted {
			continue
		}
		// A large body was not read into memory (see journal.load).
		res := result{status: r.Status}
		if r.Body != nil {
			res.body = append([]byte(r.Body), '\n')
		}
		s.outcomes.load(r.ID, r.KeyHash, res, r.body, *r.Finished)
	}
	now := time.Now()
	for _, r := range started {
		s.interrupt(r, now)
	}
	if len(recs) > 0 {
		s.log.Info("journal resumed", "records", len(recs), "queued", len(queue), "interrupted", len(started), "done", len(done))
	}
	if len(queue) > 0 {
		s.async.Add(1)
		go s.runResumed(queue)
	}
}

// interrupt settles a message that had started when the runner stopped.
func (s *Server) interrupt(r record, now time.Time) {
	res := errorResult(http.StatusInternalServerError, r.ID, KindInterrupted,
		"the runner stopped while this message ran (crash, kill or restart); it may have had effects, and it is not run again")
	ref, err := s.journal.finish(r.ID, res, now)
	if err != nil {
		s.log.Error("journal: record an interrupted message", "message_id", r.ID, "error", err)
	}
	s.outcomes.load(r.ID, r.KeyHash, res, ref, now)
	s.metrics.interrupted.Add(1)
	s.log.Warn("message interrupted", "message_id", r.ID, "idempotency_key", (&pending{keyHash: r.KeyHash}).keyLabel())
}

// runResumed runs the resumed messages in acceptance order in one turn.
// A shutdown leaves the rest accepted for the next start.
func (s *Server) runResumed(queue []*pending) {
	defer s.async.Done()
	s.turn <- struct{}{}
	defer func() { <-s.turn }()
	for _, p := range queue {
		s.metrics.queued.Add(-1)
		if s.closing.Load() {
			continue
		}
		s.execute(context.Background(), p)
	}
}
