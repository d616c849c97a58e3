// Package prestart keeps the next sandbox of a backend made, started and
// attached while a message runs, so that the next message does not wait
// for a start. It knows nothing of containers or pods: a backend hands it
// the functions that make, check and discard its own sandbox handle, and
// the Docker and pod backends share this one pool.
//
// A prestarted sandbox never saw a message. The pool holds at most one; a
// message takes it (waiting for one still starting), and the backend asks
// for a refill when it is ready for the next start. One that failed to
// start, or died while it waited, is discarded and the message starts its
// own sandbox (a cold start). Close discards the waiting one and waits for
// every start and discard the pool began, so nothing it made outlives it.
package prestart

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Funcs are what a backend gives the pool for its sandbox handle S.
type Funcs[S any] struct {
	// Start makes one sandbox, started and attached, waiting for its
	// message. On error it leaves nothing behind.
	Start func(ctx context.Context) (S, error)
	// Alive reports, without asking any API, whether a started sandbox
	// still waits (its attach has not ended). Ready and Take ask it.
	Alive func(S) bool
	// Confirm, when set, is asked by Take after Alive passes, just before
	// a sandbox gets its message: the API's own view, for a sandbox whose
	// stream can outlive it for a moment.
	Confirm func(context.Context, S) bool
	// Discard ends and removes a sandbox that gets no message.
	Discard func(S) error
	// Timeout bounds one start (zero: no bound but the context's).
	Timeout time.Duration
	// Noun names the sandbox in log lines ("container", "pod"); IDKey and
	// ID name the one a line is about.
	Noun  string
	IDKey string
	ID    func(S) string
	Log   hclog.Logger
}

// Pool holds at most one prestarted sandbox. Its zero value is not usable;
// make one with New.
type Pool[S any] struct {
	f Funcs[S]

	mu     sync.Mutex
	next   *slot[S] // the waiting sandbox, possibly still starting
	closed bool
	// bg counts starts and discards under way. Add happens only under mu
	// while the pool is open, so it never races Close's Wait.
	bg sync.WaitGroup
}

// slot is one start. done closes once s and err are set (under mu, with
// ready); dropped, set under mu while it still starts, makes the start
// discard its own result: nobody will take it.
type slot[S any] struct {
	done    chan struct{}
	s       S
	err     error
	ready   bool
	dropped bool
}

// New returns an empty pool; Refill starts its first sandbox.
func New[S any](f Funcs[S]) *Pool[S] {
	if f.Log == nil {
		f.Log = hclog.NewNullLogger()
	}
	return &Pool[S]{f: f}
}

// Refill starts a sandbox in the background unless one is waiting or
// starting, or the pool is closed. The start outlives ctx's cancellation
// (it serves a later message) but keeps its values.
func (p *Pool[S]) Refill(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.next != nil {
		return
	}
	sl := &slot[S]{done: make(chan struct{})}
	p.next = sl
	p.bg.Add(1)
	go p.start(context.WithoutCancel(ctx), sl)
}

func (p *Pool[S]) start(ctx context.Context, sl *slot[S]) {
	defer p.bg.Done()
	if p.f.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.f.Timeout)
		defer cancel()
	}
	s, err := p.f.Start(ctx)
	if err != nil {
		p.f.Log.Warn("prestart failed; the next message starts its own "+p.f.Noun, "error", err)
	}
	p.mu.Lock()
	sl.s, sl.err, sl.ready = s, err, true
	drop := sl.dropped
	p.mu.Unlock()
	close(sl.done)
	if drop && err == nil {
		p.discard(s)
	}
}

// RefillSoon schedules a refill after headStart: a start is work for the
// host, which would slow a short message's own reply, while a long message
// should still leave the next one a sandbox ready. The returned stop ends
// the wait; it returns the refill still to be done (call it when the
// backend is ready for the start), or nil when it began already.
func (p *Pool[S]) RefillSoon(ctx context.Context, headStart time.Duration) (stop func() (refill func())) {
	refill := sync.OnceFunc(func() { p.Refill(ctx) })
	timer := time.AfterFunc(headStart, refill)
	return func() func() {
		if timer.Stop() {
			return refill
		}
		return nil
	}
}

// Ready reports whether a started sandbox waits that is still alive.
func (p *Pool[S]) Ready() bool {
	p.mu.Lock()
	sl := p.next
	p.mu.Unlock()
	if sl == nil {
		return false
	}
	select {
	case <-sl.done:
		return sl.err == nil && p.f.Alive(sl.s)
	default:
		return false
	}
}

// Take hands out the waiting sandbox, waiting for one still starting. ok
// is false when there is none, its start failed, or it died while it
// waited (it is discarded then): the caller starts its own. When ctx ends
// first, the start is kept for the next message, or discarded once up if
// another took its place.
func (p *Pool[S]) Take(ctx context.Context) (s S, ok bool, err error) {
	p.mu.Lock()
	sl := p.next
	p.next = nil
	p.mu.Unlock()
	if sl == nil {
		return s, false, nil
	}
	select {
	case <-sl.done:
	case <-ctx.Done():
		p.giveBack(sl)
		return s, false, ctx.Err()
	}
	if sl.err != nil {
		return s, false, nil
	}
	// A sandbox that waited long may have been killed out of band: it
	// must never see the message.
	if !p.f.Alive(sl.s) || (p.f.Confirm != nil && !p.f.Confirm(ctx, sl.s)) {
		p.f.Log.Warn("prestarted "+p.f.Noun+" is gone; starting a fresh one", p.f.IDKey, p.f.ID(sl.s))
		p.discard(sl.s)
		return s, false, nil
	}
	return sl.s, true, nil
}

// giveBack returns an untaken start to the pool, or has it discarded when
// the pool is closed or holds another.
func (p *Pool[S]) giveBack(sl *slot[S]) {
	p.mu.Lock()
	switch {
	case p.next == nil && !p.closed:
		p.next = sl
	case !sl.ready:
		sl.dropped = true // its start discards it
	case !p.closed:
		p.bg.Add(1)
		go func() { defer p.bg.Done(); p.discardSlot(sl) }()
	default:
		// Closed: Close may be waiting already, so no new background
		// work; the discard runs here.
		p.mu.Unlock()
		p.discardSlot(sl)
		return
	}
	p.mu.Unlock()
}

func (p *Pool[S]) discardSlot(sl *slot[S]) {
	if sl.err == nil {
		p.discard(sl.s)
	}
}

// discard drops a sandbox nobody waits for; the backend logs its own
// failure to remove it, and the next start-up's sweep finds what is left.
func (p *Pool[S]) discard(s S) { _ = p.f.Discard(s) }

// Close stops refills, discards the waiting sandbox (one still starting is
// discarded by its start) and waits for the starts and discards under way.
// It returns the waiting sandbox's discard error, and ctx's error when
// background work outlives ctx (it still finishes, and discards what it
// made).
func (p *Pool[S]) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	sl := p.next
	p.next = nil
	if sl != nil && !sl.ready {
		sl.dropped = true
		sl = nil
	}
	p.mu.Unlock()
	var err error
	if sl != nil && sl.err == nil {
		err = p.f.Discard(sl.s)
	}
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}
