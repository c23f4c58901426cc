package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// semaphore makes a semaphore of permits on a locker over bs.
func semaphore(t *testing.T, bs []driver.Node, permits int, opts ...redlock.Option) *redlock.Semaphore {
	t.Helper()
	sem, err := redlock.NewSemaphore(lockerFor(t, bs, opts...), "jobs", permits)
	require.NoError(t, err)
	return sem
}

// fill takes every permit of sem, with Reject.
func fill(t *testing.T, sem *redlock.Semaphore) []*redlock.Lock {
	t.Helper()
	held := make([]*redlock.Lock, sem.Permits())
	for i := range held {
		l, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err, "permit %d of %d", i+1, sem.Permits())
		held[i] = l
	}
	return held
}

func TestSemaphoreBoundUnderContention(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			sem := semaphore(t, bs, 3, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(30, time.Millisecond)))
			locktest.Permits(t, sem, 10, 20, nil)
		})
	}
}

func TestRealServersSemaphoreBoundUnderContention(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			sem := semaphore(t, bs, 3, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(30, time.Millisecond)))
			locktest.Permits(t, sem, 10, 20, nil)
		})
	}
}

// TestSemaphorePermitsAreSlots: K Acquires take K distinct slots, the
// next is refused, and a released slot is the one taken again.
func TestSemaphorePermitsAreSlots(t *testing.T) {
	_, bs := minis(t, 3)
	sem := semaphore(t, bs, 3, redlock.WithTTL(time.Minute))
	held := fill(t, sem)
	slots := map[int]bool{}
	for _, l := range held {
		slots[l.Slot()] = true
		assert.Equal(t, sem.SlotKey(l.Slot()), l.Key(), "a permit is the lock of its slot's key")
	}
	assert.Len(t, slots, 3, "three permits, three slots")
	_, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Reject()))
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.NotErrorIs(t, err, redlock.ErrTimeout, "Reject fails at once")
	require.NoError(t, held[1].Unlock(t.Context()))
	l, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	assert.Equal(t, held[1].Slot(), l.Slot(), "the free slot")
	for _, l := range append([]*redlock.Lock{l, held[0]}, held[2]) {
		require.NoError(t, l.Unlock(t.Context()))
	}
	plain, err := lockerFor(t, bs).Lock(t.Context(), "plain")
	require.NoError(t, err)
	assert.Equal(t, -1, plain.Slot(), "a plain lock holds no slot")
	require.NoError(t, plain.Unlock(t.Context()))
}

// TestSemaphoreCrashedHoldersPermitExpires: a holder that never releases
// (it crashed) blocks its slot for the TTL only.
func TestSemaphoreCrashedHoldersPermitExpires(t *testing.T) {
	ms, bs := minis(t, 3)
	sem := semaphore(t, bs, 2, redlock.WithTTL(10*time.Second), redlock.WithStrategy(redlock.Reject()))
	crashed := fill(t, sem) // never unlocked
	_, err := sem.Acquire(t.Context())
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "full")
	ms[0].FastForward(10 * time.Second) // a quorum of nodes let the keys expire
	ms[1].FastForward(10 * time.Second)
	l, err := sem.Acquire(t.Context())
	require.NoError(t, err, "a permit whose TTL passed is free again")
	assert.Contains(t, []int{crashed[0].Slot(), crashed[1].Slot()}, l.Slot())
	require.NoError(t, l.Unlock(t.Context()))
}

// TestRealServersSemaphoreCrashedHoldersPermitExpires: another process
// takes every permit and dies without a word; its permits expire on the
// servers' own clocks, and a waiter (woken by its delays: an expiry
// announces nothing) takes one.
func TestRealServersSemaphoreCrashedHoldersPermitExpires(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			crashed := fill(t, semaphore(t, bs, 2, redlock.WithTTL(3*time.Second))) // never unlocked
			sem := semaphore(t, bs, 2, redlock.WithTTL(3*time.Second))
			_, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Reject()))
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "full while the crashed holder's permits live")
			l, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Retry(8, 20*time.Millisecond))) // waits up to 5 s
			require.NoError(t, err, "a permit whose TTL passed is free again")
			assert.Contains(t, []int{crashed[0].Slot(), crashed[1].Slot()}, l.Slot())
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

func TestSemaphoreRetryWaitsThenTimesOut(t *testing.T) {
	_, bs := minis(t, 3)
	clk := newFakeClock()
	var attempts atomic.Int64
	obs := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err != nil {
			attempts.Store(int64(e.Attempt))
		}
	})
	sem := semaphore(t, bs, 2, redlock.WithTTL(time.Hour), redlock.WithClock(clk), redlock.WithObserver(obs))
	held := fill(t, sem)
	_, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Retry(2, 10*time.Millisecond)), redlock.WithHandoff(false))
	assert.ErrorIs(t, err, redlock.ErrTimeout)
	assert.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond}, clk.Delays(), "the strategy's delays")
	assert.Equal(t, int64(6), attempts.Load(), "three passes over two slots")
	for _, l := range held {
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// TestSemaphoreRetryPassesAreGuidedByReleases: a subscribed waiter whose
// delay runs out attempts the slots that may be free and one believed held,
// in turn, not every held slot; its last pass still attempts every slot,
// so ErrTimeout means that all were found held.
func TestSemaphoreRetryPassesAreGuidedByReleases(t *testing.T) {
	_, bs := minis(t, 3)
	clk := newFakeClock()
	var mu sync.Mutex
	var tried []string
	obs := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			mu.Lock()
			tried = append(tried, e.Key)
			mu.Unlock()
		}
	})
	sem := semaphore(t, bs, 3, redlock.WithTTL(time.Hour), redlock.WithClock(clk), redlock.WithObserver(obs))
	held := fill(t, sem)
	mu.Lock()
	tried = nil // fill's own refusals
	mu.Unlock()
	_, err := sem.Acquire(t.Context(), redlock.WithStrategy(redlock.Retry(3, 10*time.Millisecond)))
	require.ErrorIs(t, err, redlock.ErrTimeout)
	mu.Lock()
	defer mu.Unlock()
	// 3: the first pass; 3: once subscribed, the slots it is first in line
	// for; 1 and 1: the probes of the first two delays; 3: the last pass.
	require.Len(t, tried, 11, "attempts: %v", tried)
	assert.NotEqual(t, tried[6], tried[7], "the probes take the held slots in turn")
	assert.ElementsMatch(t, []string{sem.SlotKey(0), sem.SlotKey(1), sem.SlotKey(2)}, tried[8:], "the last pass attempts every slot")
	for _, l := range held {
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// countingNotifier counts a node's subscriptions: made, and still live.
type countingNotifier struct {
	driver.Node
	made, live *atomic.Int64
}

func (c countingNotifier) Subscribe(ctx context.Context, deliver func(string), channels ...string) (func(), error) {
	stop, err := c.Node.(driver.Subscriber).Subscribe(ctx, deliver, channels...)
	if err != nil {
		return nil, err
	}
	c.made.Add(1)
	c.live.Add(1)
	var once sync.Once
	return func() { once.Do(func() { stop(); c.live.Add(-1) }) }, nil
}

// TestSemaphoreWaitersReuseSubscriptions: a call that ends while others
// wait leaves its subscriptions to the next waiter, and the last call to
// end stops every one.
func TestSemaphoreWaitersReuseSubscriptions(t *testing.T) {
	_, bs := minis(t, 1)
	var made, live atomic.Int64
	lk := lockerFor(t, []driver.Node{countingNotifier{bs[0], &made, &live}}, redlock.WithTTL(time.Minute))
	sem, err := redlock.NewSemaphore(lk, "jobs", 1)
	require.NoError(t, err)
	held := fill(t, sem)[0]
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	locks := make(chan *redlock.Lock, 3)
	var wg sync.WaitGroup
	defer wg.Wait()
	wait := func(inLine int) {
		wg.Go(func() {
			l, err := sem.Acquire(ctx, redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			assert.NoError(t, err)
			locks <- l
		})
		testwait.Until(t, "in line", func() bool { return redlock.InLine(lk, sem.SlotKey(0)) == inLine })
	}
	wait(1) // A
	wait(2) // B
	require.NoError(t, held.Unlock(t.Context()))
	a := <-locks // A's call ended while B waits: its subscription is parked
	wait(2)      // C takes it over
	assert.Equal(t, int64(2), made.Load(), "C subscribed with A's subscription")
	require.NoError(t, a.Unlock(t.Context()))
	b := <-locks
	require.NoError(t, b.Unlock(t.Context()))
	c := <-locks
	require.NoError(t, c.Unlock(t.Context()))
	wg.Wait()
	assert.Zero(t, live.Load(), "the last call to end stopped every subscription")
	assert.Zero(t, redlock.Joined(lk, sem.SlotKey(0)))
}

// TestSemaphoreHandoffWakesAWaiter: a waiter whose next retry is an hour
// away takes the permit released, whichever slot it is.
func TestSemaphoreHandoffWakesAWaiter(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			semaphoreHandoff(t, bs)
		})
	}
}

func TestRealServersSemaphoreHandoffWakesAWaiter(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			semaphoreHandoff(t, bs)
		})
	}
}

func semaphoreHandoff(t *testing.T, bs []driver.Node) {
	lk := lockerFor(t, bs, redlock.WithTTL(time.Minute))
	sem, err := redlock.NewSemaphore(lk, "jobs", 3)
	require.NoError(t, err)
	held := fill(t, sem)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := sem.Acquire(ctx, redlock.WithStrategy(redlock.Retry(10, time.Hour)))
		assert.NoError(t, err, "the waiter was woken by the release, not by its hour-long delay")
		got <- l
	}()
	for i := range 3 { // subscribed to every slot
		testwait.Until(t, "in line for every slot", func() bool { return redlock.InLine(lk, sem.SlotKey(i)) == 1 })
	}
	require.NoError(t, held[1].Unlock(t.Context()))
	l := <-got
	require.NotNil(t, l)
	assert.Equal(t, held[1].Slot(), l.Slot(), "the released slot")
	for _, l := range []*redlock.Lock{l, held[0], held[2]} {
		require.NoError(t, l.Unlock(t.Context()))
	}
	for i := range 3 {
		assert.Zero(t, redlock.Joined(lk, sem.SlotKey(i)), "the waiter left every line")
	}
}

// TestSemaphoreWaitersTakeTurns: waiters of one locker get released
// permits in arrival order, one release, one woken waiter.
func TestSemaphoreWaitersTakeTurns(t *testing.T) {
	_, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	sem, err := redlock.NewSemaphore(r, "jobs", 2)
	require.NoError(t, err)
	held := fill(t, sem)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	const waiters = 3
	order, locks := make(chan int, waiters), make(chan *redlock.Lock, waiters)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range waiters {
		wg.Go(func() {
			if l, err := sem.Acquire(ctx, redlock.WithStrategy(redlock.Retry(10, time.Hour))); err == nil {
				order <- i
				locks <- l
			}
		})
		for slot := range 2 { // waiter i is in every slot's line before i+1 comes
			testwait.Until(t, "waiter i in line", func() bool { return redlock.InLine(r, sem.SlotKey(slot)) == i+1 })
		}
	}
	release := held[0]
	for want := range waiters {
		require.NoError(t, release.Unlock(t.Context()))
		select {
		case got := <-order:
			assert.Equal(t, want, got, "woken in arrival order")
		case <-ctx.Done():
			t.Fatal("a waiter was not woken")
		}
		release = <-locks
	}
	require.NoError(t, release.Unlock(t.Context()))
	require.NoError(t, held[1].Unlock(t.Context()))
}

// TestSemaphoreFencesPerSlot: with WithFencing every slot counts its own
// tokens, strictly increasing across that slot's holders.
func TestSemaphoreFencesPerSlot(t *testing.T) {
	_, bs := minis(t, 3)
	sem := semaphore(t, bs, 2, redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
	last := map[int]int64{}
	for range 10 {
		for _, l := range fill(t, sem) {
			assert.Greater(t, l.Fence(), last[l.Slot()], "slot %d's tokens increase", l.Slot())
			last[l.Slot()] = l.Fence()
			require.NoError(t, l.Unlock(t.Context()))
		}
	}
	assert.Len(t, last, 2)
}

func TestSemaphoreDo(t *testing.T) {
	ms, bs := minis(t, 3)
	sem := semaphore(t, bs, 2, redlock.WithTTL(time.Minute), redlock.WithRenewEvery(20*time.Millisecond))
	var slot int
	err := sem.Do(t.Context(), func(ctx context.Context) error {
		l, ok := redlock.FromContext(ctx)
		require.True(t, ok, "fn finds its permit")
		slot = l.Slot()
		assert.True(t, ms[0].Exists(sem.SlotKey(slot)))
		return nil
	})
	require.NoError(t, err)
	assert.False(t, ms[0].Exists(sem.SlotKey(slot)), "released when fn returned")

	var cause error
	err = sem.Do(t.Context(), func(ctx context.Context) error {
		l, _ := redlock.FromContext(ctx)
		for _, m := range ms[:2] {
			m.Del(l.Key()) // a quorum forgot the permit
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		case <-time.After(watchdog):
			return errors.New("fn was not cancelled")
		}
	})
	assert.ErrorIs(t, cause, redlock.ErrLockLost, "a lost permit cancels fn")
	assert.ErrorIs(t, err, redlock.ErrLockLost)
}

func TestSemaphoreAutoRenewAndLost(t *testing.T) {
	_, bs := minis(t, 1)
	sem := semaphore(t, bs, 1, redlock.WithTTL(time.Minute))
	l, err := sem.Acquire(t.Context(), redlock.WithAutoRenew(), redlock.WithRenewEvery(10*time.Millisecond))
	require.NoError(t, err)
	first := l.Until()
	testwait.Until(t, "renewed", func() bool { return l.Until().After(first) })
	require.NoError(t, l.Unlock(t.Context()))
	<-l.Lost() // closed by Unlock
}

func TestSemaphoreBadInput(t *testing.T) {
	_, bs := minis(t, 1)
	lk := lockerFor(t, bs)
	ctors := []struct {
		name    string
		lk      *redlock.Redlock
		sem     string
		permits int
		opts    []redlock.Option
	}{
		{"nil locker", nil, "s", 1, nil},
		{"nil *Redlock", (*redlock.Redlock)(nil), "s", 1, nil},
		{"empty name", lk, "", 1, nil},
		{"no permits", lk, "s", 0, nil},
		{"negative permits", lk, "s", -1, nil},
		{"too many permits", lk, "s", redlock.MaxPermits + 1, nil},
		{"bad option", lk, "s", 1, []redlock.Option{redlock.WithTTL(-time.Second)}},
	}
	for _, c := range ctors {
		_, err := redlock.NewSemaphore(c.lk, c.sem, c.permits, c.opts...)
		assert.ErrorIs(t, err, redlock.ErrInvalid, c.name)
	}
	sem, err := redlock.NewSemaphore(lk, "s", redlock.MaxPermits)
	require.NoError(t, err, "MaxPermits is allowed")
	assert.Equal(t, "s:permit:255", sem.SlotKey(redlock.MaxPermits-1))
	assert.Empty(t, sem.SlotKey(-1), "no such slot")
	assert.Empty(t, sem.SlotKey(redlock.MaxPermits), "no such slot")
	//nolint:staticcheck // a nil context is the bad input under test
	_, err = sem.Acquire(nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "nil context")
	_, err = sem.Acquire(t.Context(), redlock.WithStrategy(nil))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "bad option to Acquire")
	//nolint:staticcheck // a nil context is the bad input under test
	assert.ErrorIs(t, sem.Do(nil, func(context.Context) error { return nil }), redlock.ErrInvalid, "nil context")
	assert.ErrorIs(t, sem.Do(t.Context(), nil), redlock.ErrInvalid, "nil function")
	assert.ErrorIs(t, sem.Do(t.Context(), func(context.Context) error { return nil }, redlock.WithRenewEvery(time.Hour)),
		redlock.ErrInvalid, "a renewal slower than the TTL")
}

// TestSemaphoreObserverEvents: one EventAcquire per call, keyed by the
// granted slot (the name when none was); refused slots are contention on
// their own keys.
func TestSemaphoreObserverEvents(t *testing.T) {
	_, bs := minis(t, 1)
	var mu sync.Mutex
	var events []redlock.Event
	obs := redlock.Observer(func(e redlock.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	sem := semaphore(t, bs, 2, redlock.WithObserver(obs), redlock.WithStrategy(redlock.Reject()))
	held := fill(t, sem)
	_, err := sem.Acquire(t.Context())
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	mu.Lock()
	seen := slices.Clone(events)
	mu.Unlock()
	var acquires []string
	contention := map[string]bool{}
	for _, e := range seen {
		switch e.Kind {
		case redlock.EventAcquire:
			acquires = append(acquires, e.Key)
		case redlock.EventContention:
			contention[e.Key] = true
		}
	}
	assert.Equal(t, []string{held[0].Key(), held[1].Key(), "jobs"}, acquires)
	assert.Equal(t, map[string]bool{sem.SlotKey(0): true, sem.SlotKey(1): true}, contention, "the full semaphore refused on both slots")
	for _, l := range held {
		require.NoError(t, l.Unlock(t.Context()))
	}
}
