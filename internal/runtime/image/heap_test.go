package image

import (
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// peakHeap runs f while sampling the heap every few milliseconds and
// returns the highest HeapInuse seen above the level before f, and the
// bytes f allocated in all.
func peakHeap(f func()) (peak, allocated uint64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var high uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			high = max(high, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	high = max(high, after.HeapInuse)
	return high - min(high, before.HeapInuse), after.TotalAlloc - before.TotalAlloc
}

// An isolation build's memory does not grow with its context: the runner
// binary (tens of MiB) is streamed to the daemon, never held whole.
func TestBuildHeapBounded(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	ctx := context.Background()
	bin := runner(t)
	fi, err := os.Stat(bin.Path)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{BaseImage: rtBase(t, cli, "heap"), Manager: ManagerNone}
	b := NewBuilder(cli)
	var res Result
	var berr error
	start := time.Now()
	peak, allocated := peakHeap(func() {
		res, berr = b.Build(ctx, Request{Spec: spec, Pull: PullNever, Version: rtVersion, Runner: bin})
	})
	took := time.Since(start)
	if berr != nil {
		t.Fatal(berr)
	}
	testutil.Cleanup(t, "remove image "+res.Isolated, func() error {
		return b.Delete(context.Background(), Target{Isolated: res.Isolated, IsolatedID: res.IsolatedID})
	})
	t.Logf("context %.1f MiB: build %s, peak heap +%.1f MiB, allocated %.1f MiB",
		float64(fi.Size())/(1<<20), took.Round(time.Millisecond), float64(peak)/(1<<20), float64(allocated)/(1<<20))
	if limit := uint64(16 << 20); peak > limit || allocated > uint64(fi.Size())/2 {
		t.Errorf("a %d MiB context took a peak heap of +%d MiB and %d MiB allocated; want under %d MiB and under half the context",
			fi.Size()>>20, peak>>20, allocated>>20, limit>>20)
	}
}
