// Package locktest holds checks that tests of every adapter run on a
// Locker. (internal/exclusion, which the fault suites use, does not import
// the lock package; this one does.)
package locktest

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quorumlock/redlock"
)

// Counter has workers goroutines take key rounds times each on lk and,
// holding it, increment a shared counter with a read, a yield and a write:
// two holders inside at once lose an update, so the exact final count
// proves mutual exclusion. It fails t on an overlap, a lost update, any
// failure other than a wait that timed out (ErrTimeout), a failed Unlock,
// or when half the acquisitions or more failed. held, when not nil, is
// called with each lock while it is held, one holder at a time.
func Counter(t testing.TB, lk redlock.Locker, key string, workers, rounds int, held func(*redlock.Lock)) {
	t.Helper()
	ctx := t.Context()
	var counter, inside, overlaps atomic.Int64
	var mu sync.Mutex // held is called under it: it need not be safe for concurrent use
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for range workers {
		wg.Go(func() {
			for range rounds {
				l, err := lk.Lock(ctx, key)
				if err != nil {
					errs <- err
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if held != nil {
					mu.Lock()
					held(l)
					mu.Unlock()
				}
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if !errors.Is(err, redlock.ErrTimeout) {
			t.Fatalf("%s: the only acceptable failure is a wait that timed out, got %v", key, err)
		}
		failed++
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%s: %d overlapping holders", key, n)
	}
	if got, want := counter.Load(), int64(workers*rounds-failed); got != want {
		t.Errorf("%s: counter %d, want %d: every update under the lock counted exactly once", key, got, want)
	}
	if failed >= workers*rounds/2 {
		t.Errorf("%s: %d of %d acquisitions failed: most must succeed", key, failed, workers*rounds)
	}
}
