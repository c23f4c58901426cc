// Package locktest holds checks that tests of every adapter run on a
// Locker. (internal/exclusion, which the fault suites use, does not import
// the lock package; this one does.)
package locktest

import (
	"context"
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
	c := contention{name: key, bound: 1, workers: workers, rounds: rounds, held: held,
		acquire: func(ctx context.Context) (*redlock.Lock, error) { return lk.Lock(ctx, key) }}
	c.run(t)
}

// Permits is Counter for a semaphore: workers goroutines take a permit of
// sem rounds times each and, holding it, increment the counter of its slot
// (its Key) with a read, a yield and a write. It fails t when more holders
// than sem's permits were inside at once, on a lost update of a slot's
// counter (two holders of one slot), and on the failures Counter fails on.
func Permits(t testing.TB, sem *redlock.Semaphore, workers, rounds int, held func(*redlock.Lock)) {
	t.Helper()
	c := contention{name: sem.Name(), bound: sem.Permits(), workers: workers, rounds: rounds, held: held,
		acquire: func(ctx context.Context) (*redlock.Lock, error) { return sem.Acquire(ctx) }}
	c.run(t)
}

// PermitsAcross is Permits with the workers' acquisitions spread over
// sems, semaphores of one name and count on lockers of their own (as many
// processes would have): together they must still admit no more holders
// than the permits.
func PermitsAcross(t testing.TB, sems []*redlock.Semaphore, workers, rounds int) {
	t.Helper()
	var next atomic.Int64
	c := contention{name: sems[0].Name(), bound: sems[0].Permits(), workers: workers, rounds: rounds,
		acquire: func(ctx context.Context) (*redlock.Lock, error) {
			return sems[int(next.Add(1))%len(sems)].Acquire(ctx)
		}}
	c.run(t)
}

// contention is one Counter or Permits run: at most bound holders of
// name at once, each acquired with acquire.
type contention struct {
	name            string
	bound           int
	acquire         func(context.Context) (*redlock.Lock, error)
	workers, rounds int
	held            func(*redlock.Lock)
}

// tally is what the workers of a contention run share.
type tally struct {
	inside, overlaps atomic.Int64
	mu               sync.Mutex // held is called under it: it need not be safe for concurrent use
	counters         sync.Map   // key → *atomic.Int64, updated non-atomically
}

func (c *contention) run(t testing.TB) {
	t.Helper()
	var tl tally
	var wg sync.WaitGroup
	errs := make(chan error, c.workers*c.rounds)
	for range c.workers {
		wg.Go(func() {
			for range c.rounds {
				if err := c.once(t.Context(), &tl); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	c.check(t, &tl, errs)
}

// once acquires, counts itself in and increments its key's counter, then
// leaves and releases.
func (c *contention) once(ctx context.Context, tl *tally) error {
	l, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	if tl.inside.Add(1) > int64(c.bound) {
		tl.overlaps.Add(1)
	}
	if c.held != nil {
		tl.mu.Lock()
		c.held(l)
		tl.mu.Unlock()
	}
	counter, _ := tl.counters.LoadOrStore(l.Key(), new(atomic.Int64))
	v := counter.(*atomic.Int64).Load()
	runtime.Gosched()
	counter.(*atomic.Int64).Store(v + 1)
	tl.inside.Add(-1)
	return l.Unlock(ctx)
}

func (c *contention) check(t testing.TB, tl *tally, errs <-chan error) {
	t.Helper()
	failed := 0
	for err := range errs {
		if !errors.Is(err, redlock.ErrTimeout) {
			t.Fatalf("%s: the only acceptable failure is a wait that timed out, got %v", c.name, err)
		}
		failed++
	}
	if n := tl.overlaps.Load(); n != 0 {
		t.Errorf("%s: %d times more than %d holders inside at once", c.name, n, c.bound)
	}
	var counted int64
	tl.counters.Range(func(_, v any) bool {
		counted += v.(*atomic.Int64).Load()
		return true
	})
	if want := int64(c.workers*c.rounds - failed); counted != want {
		t.Errorf("%s: counters sum to %d, want %d: every update under a lock counted exactly once", c.name, counted, want)
	}
	if failed >= c.workers*c.rounds/2 {
		t.Errorf("%s: %d of %d acquisitions failed: most must succeed", c.name, failed, c.workers*c.rounds)
	}
}
