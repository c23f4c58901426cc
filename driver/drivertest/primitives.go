package drivertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
)

// ttl is the primitives' lock lifetime: long enough for a loaded machine,
// short enough that waiting out an expiry costs little.
const ttl = 500 * time.Millisecond

// checkPrimitives runs every primitive of the core over the target's
// node: the adapter only runs the core's scripts, so none needs code of
// its own. Three targets with distinct names make a Redlock too.
func checkPrimitives(t *testing.T, newTarget func(t *testing.T) Target) {
	tg := newTarget(t)
	lockers := map[string]*redlock.Redlock{"Single": newLocker(t, tg.Node)}
	more := []Target{tg, newTarget(t), newTarget(t)}
	if names := map[string]bool{more[0].Node.Info().Name: true, more[1].Node.Info().Name: true, more[2].Node.Info().Name: true}; len(names) == 3 {
		lockers["Redlock"] = newLocker(t, more[0].Node, more[1].Node, more[2].Node)
	}
	for name, l := range lockers {
		t.Run(name, func(t *testing.T) {
			t.Run("Mutex", func(t *testing.T) { checkMutex(t, l, tg) })
			t.Run("Fencing", func(t *testing.T) { checkFencing(t, l) })
			t.Run("Sets", func(t *testing.T) { checkSets(t, l) })
			t.Run("ReadWrite", func(t *testing.T) { checkReadWrite(t, l) })
			t.Run("Semaphore", func(t *testing.T) { checkSemaphore(t, l) })
			t.Run("Election", func(t *testing.T) { checkElection(t, l) })
			t.Run("Fairness", func(t *testing.T) { checkFairness(t, l) })
			t.Run("Handoff", func(t *testing.T) { checkHandoff(t, l, tg) })
		})
	}
}

func newLocker(t *testing.T, nodes ...driver.Node) *redlock.Redlock {
	t.Helper()
	l, err := redlock.New(nodes, redlock.WithTTL(ttl), redlock.WithNodeTimeout(ttl/5), redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// must returns what fails t when a call returns an error, else its lock.
func must(t *testing.T) func(*redlock.Lock, error) *redlock.Lock {
	return func(l *redlock.Lock, err error) *redlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

func unlock(t *testing.T, l *redlock.Lock) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

func refused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Errorf("%s = %v, want ErrNotAcquired: the lock is held", what, err)
	}
}

// checkMutex: a held key refuses a second Lock; Extend keeps it; Unlock
// frees it; a lock not extended expires after its TTL.
func checkMutex(t *testing.T, l *redlock.Redlock, tg Target) {
	k := prefix(t)
	a := must(t)(l.Lock(t.Context(), k))
	_, err := l.Lock(t.Context(), k)
	refused(t, "a second Lock", err)
	if err := a.Extend(t.Context(), ttl); err != nil {
		t.Errorf("Extend: %v", err)
	}
	unlock(t, a)
	b := must(t)(l.Lock(t.Context(), k))
	if tg.Elapse != nil {
		tg.Elapse(2 * ttl)
	} else {
		time.Sleep(3 * ttl / 2)
	}
	c, err := l.Lock(t.Context(), k)
	if err != nil {
		t.Fatalf("Lock after the holder's TTL ran out: %v (the key must expire)", err)
	}
	if err := b.Unlock(context.Background()); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("the expired holder's Unlock = %v, want ErrNotHeld: it must not delete the new holder's key", err)
	}
	unlock(t, c)
}

// checkFencing: successive holders get strictly increasing tokens.
func checkFencing(t *testing.T, l *redlock.Redlock) {
	k := prefix(t)
	var last int64
	for range 3 {
		h := must(t)(l.Lock(t.Context(), k, redlock.WithFencing()))
		if h.Fence() <= last {
			t.Errorf("fencing token %d after %d: not increasing", h.Fence(), last)
		}
		last = h.Fence()
		unlock(t, h)
	}
}

// checkSets: a set of keys (one hash tag) excludes a Lock of any of them.
func checkSets(t *testing.T, l *redlock.Redlock) {
	k := prefix(t)
	set := must(t)(l.LockMany(t.Context(), []string{k + ":a", k + ":b"}, redlock.WithFencing()))
	_, err := l.Lock(t.Context(), k+":b")
	refused(t, "a Lock of a key of a held set", err)
	if len(set.Fences()) != 2 {
		t.Errorf("a set of two keys has %d fencing tokens", len(set.Fences()))
	}
	unlock(t, set)
	unlock(t, must(t)(l.Lock(t.Context(), k+":b")))
}

// checkReadWrite: readers share a key, a writer excludes them.
func checkReadWrite(t *testing.T, l *redlock.Redlock) {
	k := prefix(t)
	r1 := must(t)(l.RLock(t.Context(), k))
	r2 := must(t)(l.RLock(t.Context(), k))
	_, err := l.WLock(t.Context(), k)
	refused(t, "a writer while readers hold", err)
	unlock(t, r1)
	unlock(t, r2)
	w := must(t)(l.WLock(t.Context(), k))
	_, err = l.RLock(t.Context(), k)
	refused(t, "a reader while the writer holds", err)
	unlock(t, w)
}

// checkSemaphore: two permits admit two holders, not three.
func checkSemaphore(t *testing.T, l *redlock.Redlock) {
	sem, err := redlock.NewSemaphore(l, prefix(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	a := must(t)(sem.Acquire(t.Context()))
	b := must(t)(sem.Acquire(t.Context()))
	_, err = sem.Acquire(t.Context())
	refused(t, "a third permit of two", err)
	unlock(t, a)
	unlock(t, b)
}

// checkElection: a campaign wins, Leader reads its value and term, and
// Resign frees the election.
func checkElection(t *testing.T, l *redlock.Redlock) {
	e, err := redlock.NewElection(l, prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	lead, err := e.Campaign(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Leader(t.Context())
	if err != nil || got.Value != "node-a" || got.Term != lead.Term() {
		t.Errorf("Leader = %+v, %v; want node-a with term %d", got, err, lead.Term())
	}
	if err := lead.Resign(t.Context()); err != nil {
		t.Errorf("Resign: %v", err)
	}
	if got, err := e.Leader(t.Context()); !errors.Is(err, redlock.ErrNoLeader) {
		t.Errorf("Leader after Resign = %+v, %v; want ErrNoLeader", got, err)
	}
}

// checkFairness: a fair call takes and releases through the key's queue.
func checkFairness(t *testing.T, l *redlock.Redlock) {
	k := prefix(t)
	h := must(t)(l.Lock(t.Context(), k, redlock.WithFairness(true)))
	_, err := l.Lock(t.Context(), k, redlock.WithFairness(true))
	refused(t, "a fair Lock of a held key", err)
	unlock(t, h)
	unlock(t, must(t)(l.Lock(t.Context(), k, redlock.WithFairness(true), redlock.WithFencing())))
}

// checkHandoff: over a Subscriber, a waiter is woken by the release, not
// by its hour-long delay.
func checkHandoff(t *testing.T, l *redlock.Redlock, tg Target) {
	if _, ok := tg.Node.(driver.Subscriber); !ok {
		t.Skip("the node is no driver.Subscriber")
	}
	k := prefix(t)
	held := must(t)(l.Lock(t.Context(), k, redlock.WithTTL(10*time.Second)))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		w, err := l.Lock(ctx, k, redlock.WithStrategy(redlock.Retry(10, time.Hour)))
		if err == nil {
			err = w.Unlock(context.Background())
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the waiter's first attempt, then its subscription
	unlock(t, held)
	if err := <-got; err != nil {
		t.Errorf("the waiter was not woken by the release: %v", err)
	}
}
