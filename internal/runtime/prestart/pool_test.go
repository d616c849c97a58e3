package prestart

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// box is a fake sandbox: the pool's logic needs no daemon.
type box struct {
	id   int
	dead atomic.Bool
}

// fakes records what the pool did with the boxes it asked for. gate, when
// set, holds every start until it is closed or receives.
type fakes struct {
	mu        sync.Mutex
	started   []*box
	discarded map[*box]int
	gate      chan struct{}
	fail      error
	confirm   func(*box) bool
	// discardErr is returned by every discard.
	discardErr error
}

func (f *fakes) pool() *Pool[*box] {
	fn := Funcs[*box]{
		Start: func(ctx context.Context) (*box, error) {
			if f.gate != nil {
				select {
				case <-f.gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if f.fail != nil {
				return nil, f.fail
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			b := &box{id: len(f.started) + 1}
			f.started = append(f.started, b)
			return b, nil
		},
		Alive: func(b *box) bool { return !b.dead.Load() },
		Discard: func(b *box) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.discarded == nil {
				f.discarded = map[*box]int{}
			}
			f.discarded[b]++
			return f.discardErr
		},
		Timeout: time.Minute,
		Noun:    "box",
		IDKey:   "box",
		ID:      func(b *box) string { return string(rune('0' + b.id)) },
	}
	if f.confirm != nil {
		fn.Confirm = func(_ context.Context, b *box) bool { return f.confirm(b) }
	}
	return New(fn)
}

func (f *fakes) counts() (started, discarded int, twice bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.discarded {
		discarded++
		twice = twice || n > 1
	}
	return len(f.started), discarded, twice
}

func waitReady(t *testing.T, p *Pool[*box]) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !p.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
	}
}

func closePool(t *testing.T, p *Pool[*box]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// A message that comes while the prestart is still under way waits for it
// and gets it, rather than starting a second sandbox.
func TestTakeWaitsForStartUnderWay(t *testing.T) {
	f := &fakes{gate: make(chan struct{})}
	p := f.pool()
	p.Refill(context.Background())
	if p.Ready() {
		t.Fatal("ready before the start finished")
	}
	type taken struct {
		b   *box
		ok  bool
		err error
	}
	got := make(chan taken, 1)
	go func() {
		b, ok, err := p.Take(context.Background())
		got <- taken{b, ok, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("take returned %+v before the start finished", r)
	case <-time.After(50 * time.Millisecond):
	}
	close(f.gate)
	r := <-got
	if r.err != nil || !r.ok || r.b == nil || r.b.id != 1 {
		t.Fatalf("take: %+v, want the prestarted box 1", r)
	}
	if p.Ready() {
		t.Error("ready after the only box was taken")
	}
	closePool(t, p)
	if s, d, _ := f.counts(); s != 1 || d != 0 {
		t.Errorf("started %d discarded %d: want the one box, handed out, not discarded", s, d)
	}
}

// A failed prestart leaves nothing to take: the message starts its own
// (ok is false, no error), and nothing is discarded.
func TestFailedPrestartFallsBackToColdStart(t *testing.T) {
	f := &fakes{fail: errors.New("daemon said no")}
	p := f.pool()
	p.Refill(context.Background())
	b, ok, err := p.Take(context.Background())
	if err != nil || ok || b != nil {
		t.Fatalf("take after a failed start: %v %v %v, want a cold start", b, ok, err)
	}
	if p.Ready() {
		t.Error("ready with nothing started")
	}
	closePool(t, p)
	if _, d, _ := f.counts(); d != 0 {
		t.Errorf("%d discarded after a failed start", d)
	}
}

// A prestarted sandbox that died while it waited, or that the backend's
// API no longer confirms, is discarded and never handed a message.
func TestDeadPrestartIsDiscarded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kill    bool
		confirm func(*box) bool
	}{
		{name: "stream ended", kill: true},
		{name: "API says gone", confirm: func(*box) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakes{confirm: tc.confirm}
			p := f.pool()
			p.Refill(context.Background())
			waitReady(t, p)
			if tc.kill {
				f.started[0].dead.Store(true)
				if p.Ready() {
					t.Error("a dead box reported ready")
				}
			}
			if b, ok, err := p.Take(context.Background()); ok || err != nil {
				t.Fatalf("take handed out %v (%v, %v), want a cold start", b, ok, err)
			}
			closePool(t, p)
			if s, d, twice := f.counts(); s != 1 || d != 1 || twice {
				t.Errorf("started %d discarded %d (twice %v), want the dead one discarded once", s, d, twice)
			}
		})
	}
}

// A message whose context ends while the prestart runs leaves it to the
// next message; one that finds another in its place has it discarded.
func TestTakeCancelledKeepsTheStart(t *testing.T) {
	f := &fakes{gate: make(chan struct{})}
	p := f.pool()
	p.Refill(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, ok, err := p.Take(ctx); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take with an ended context: %v %v", ok, err)
	}
	close(f.gate)
	b, ok, err := p.Take(context.Background())
	if err != nil || !ok || b.id != 1 {
		t.Fatalf("next take: %v %v %v, want the kept box 1", b, ok, err)
	}

	// Now one is taken while a start runs, and a refill fills the place
	// before the take gives up: the box it gave up must not leak.
	f.gate = make(chan struct{})
	p.Refill(context.Background()) // box 2, held at the gate
	ctx2, cancel2 := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, _, err := p.Take(ctx2); errc <- err }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		empty := p.next == nil
		p.mu.Unlock()
		if empty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("take never started waiting")
		}
	}
	p.Refill(context.Background()) // box 3 takes the place
	cancel2()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("take: %v", err)
	}
	close(f.gate)
	closePool(t, p)
	if s, d, twice := f.counts(); s != 3 || d != 2 || twice {
		t.Errorf("started %d discarded %d (twice %v): want boxes 2 and 3 discarded once", s, d, twice)
	}
}

// Close discards the waiting sandbox, returns its discard error, and waits
// for a start still under way, which discards what it made.
func TestCloseDiscardsAndWaits(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		f := &fakes{discardErr: errors.New("remove failed")}
		p := f.pool()
		p.Refill(context.Background())
		waitReady(t, p)
		if err := p.Close(context.Background()); !errors.Is(err, f.discardErr) {
			t.Fatalf("close: %v, want the discard's error", err)
		}
		if s, d, _ := f.counts(); s != 1 || d != 1 {
			t.Errorf("started %d discarded %d", s, d)
		}
		p.Refill(context.Background())
		if p.Ready() || p.next != nil {
			t.Error("refilled after Close")
		}
	})
	t.Run("starting", func(t *testing.T) {
		f := &fakes{gate: make(chan struct{})}
		p := f.pool()
		p.Refill(context.Background())
		closed := make(chan error, 1)
		go func() { closed <- p.Close(context.Background()) }()
		select {
		case err := <-closed:
			t.Fatalf("close returned (%v) while a start was under way", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(f.gate)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if s, d, _ := f.counts(); s != 1 || d != 1 {
			t.Errorf("started %d discarded %d: the start finished after Close must be discarded before Close returns", s, d)
		}
	})
	t.Run("gives up", func(t *testing.T) {
		f := &fakes{gate: make(chan struct{})}
		p := f.pool()
		p.Refill(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("close: %v, want its context's error", err)
		}
		close(f.gate)
		closePool(t, p) // a second Close waits for the rest
		if s, d, _ := f.counts(); s != 1 || d != 1 {
			t.Errorf("started %d discarded %d: the late start must still be discarded", s, d)
		}
	})
}

// Close racing refills and takes: every box made is handed out or
// discarded exactly once by the time Close returns, and none starts after.
func TestCloseRacingRefillLeaksNothing(t *testing.T) {
	for i := range 200 {
		f := &fakes{}
		p := f.pool()
		var taken atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(2)
			go func() { defer wg.Done(); p.Refill(context.Background()) }()
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
				defer cancel()
				if _, ok, _ := p.Take(ctx); ok {
					taken.Add(1)
				}
			}()
		}
		closePool(t, p)
		s, d, twice := f.counts()
		wg.Wait()
		p.Refill(context.Background())
		if s2, _, _ := f.counts(); s2 != s {
			t.Fatalf("run %d: %d started after Close returned", i, s2-s)
		}
		// A take that ended after Close may still hand a box back to
		// the closed pool: it is discarded then, on the taker's own time.
		_, d2, twice2 := f.counts()
		if twice || twice2 || int(taken.Load())+d2 != s || d > d2 {
			t.Fatalf("run %d: started %d, taken %d, discarded %d then %d (twice %v)", i, s, taken.Load(), d, d2, twice || twice2)
		}
	}
}

// RefillSoon starts the refill after the head start, or leaves it to the
// caller when stopped first.
func TestRefillSoon(t *testing.T) {
	f := &fakes{}
	p := f.pool()
	stop := p.RefillSoon(context.Background(), time.Hour)
	refill := stop()
	if refill == nil {
		t.Fatal("stopped before the head start, yet no refill left to do")
	}
	if s, _, _ := f.counts(); s != 0 || p.next != nil {
		t.Fatal("started before the head start")
	}
	refill()
	waitReady(t, p)
	if _, ok, _ := p.Take(context.Background()); !ok {
		t.Fatal("nothing to take after the refill")
	}

	stop = p.RefillSoon(context.Background(), time.Millisecond)
	waitReady(t, p)
	if refill := stop(); refill != nil {
		t.Error("the head start passed, yet a refill is left to do")
	}
	closePool(t, p)
	if s, d, _ := f.counts(); s != 2 || d != 1 {
		t.Errorf("started %d discarded %d", s, d)
	}
}
