package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitingFor returns an observer that counts failed attempts on key, and
// a function that waits (up to the watchdog) until n were made.
func waitingFor(t *testing.T) (redlock.Observer, func(n int64)) {
	var failed atomic.Int64
	obs := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			failed.Add(1)
		}
	})
	return obs, func(n int64) {
		t.Helper()
		testwait.Until(t, `failed.Load() >= n`, func() bool { return failed.Load() >= n })
	}
}

func TestReleasePublishes(t *testing.T) {
	ms, bs := minis(t, 1)
	ps := redistest.Client(t, ms[0].Addr()).Subscribe(t.Context(), redlock.ReleaseChannel("k"))
	defer ps.Close()
	_, err := ps.Receive(t.Context()) // the subscription is active
	require.NoError(t, err)
	s, err := redlock.NewSingle(bs[0])
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	msg, err := ps.ReceiveMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "redlock:released:k", msg.Channel)

	// A release that finds someone else's key deletes and announces nothing.
	require.NoError(t, ms[0].Set("k", "other"))
	ok, err := redlock.On(bs[0]).Release(t.Context(), "k", "not-ours", true)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, 1, ms[0].Publish(redlock.ReleaseChannel("k"), "marker"), "our subscriber is still there")
	msg, err = ps.ReceiveMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "marker", msg.Payload, "nothing was published before the marker")
}

// TestHandoffWakesTheWaiter: a waiter whose next retry is an hour away
// gets the lock as soon as the holder releases it.
func TestHandoffWakesTheWaiter(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			handoffWakesTheWaiter(t, bs)
		})
	}
}

func TestRealServersHandoffWakesTheWaiter(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			handoffWakesTheWaiter(t, bs)
		})
	}
}

func handoffWakesTheWaiter(t *testing.T, bs []driver.Node) {
	obs, waitFailures := waitingFor(t)
	lk := lockerFor(t, bs, redlock.WithTTL(time.Minute), redlock.WithObserver(obs))
	holder, err := lk.Lock(t.Context(), "k")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := lk.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(10, time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	waitFailures(2) // the first attempt, and the one made once subscribed
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-got, "the waiter was woken by the release, not by its hour-long delay")
}

func TestHandoffOff(t *testing.T) {
	ms, bs := minis(t, 1)
	obs, waitFailures := waitingFor(t)
	s, err := redlock.NewSingle(bs[0], redlock.WithObserver(obs), redlock.WithHandoff(false))
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "other"))
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(10, time.Hour)))
		got <- err
	}()
	waitFailures(1)
	assert.Zero(t, ms[0].PubSubNumSub(redlock.ReleaseChannel("k"))[redlock.ReleaseChannel("k")], "no subscription with hand-off off")
	cancel()
	assert.ErrorIs(t, <-got, context.Canceled)
}

// TestHandoffSharesOneConnection: many waiters on one node share one
// subscription, and it is gone when they are.
func TestHandoffSharesOneConnection(t *testing.T) {
	ms, bs := minis(t, 1)
	obs, waitFailures := waitingFor(t)
	s, err := redlock.NewSingle(bs[0], redlock.WithObserver(obs), redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	holder, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	const waiters = 6
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	var wg sync.WaitGroup
	var acquired atomic.Int64
	for range waiters {
		wg.Go(func() {
			l, err := s.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			if err == nil {
				acquired.Add(1)
				_ = l.Unlock(t.Context())
			}
		})
	}
	waitFailures(1)                                                                                                  // the first failed; the others may queue behind it without an attempt
	testwait.Until(t, `redlock.InLine(s, "k") == waiters`, func() bool { return redlock.InLine(s, "k") == waiters }) // all subscribed
	assert.Equal(t, 1, ms[0].PubSubNumSub(redlock.ReleaseChannel("k"))[redlock.ReleaseChannel("k")],
		"six waiters, one subscribed connection")
	require.NoError(t, holder.Unlock(t.Context()))
	wg.Wait() // each release wakes the next in line: the six take turns
	assert.Equal(t, int64(waiters), acquired.Load())
	testwait.Until(t, `len(ms[0].PubSubChannels("*")) == 0`, func() bool { return len(ms[0].PubSubChannels("*")) == 0 })
	assert.Zero(t, redlock.Joined(s, "k"), "the line is gone with its waiters")
}

// TestHandoffWakesWaitersInOrder: waiters of one process are woken first
// come, first served: one release, one woken waiter.
func TestHandoffWakesWaitersInOrder(t *testing.T) {
	_, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	holder, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	const waiters = 4
	order := make(chan int, waiters)
	locks := make(chan *redlock.Lock, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			l, err := r.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			if err == nil {
				order <- i
				locks <- l
			}
		})
		testwait.Until(t, `redlock.InLine(r, "k") == i+1`, func() bool { return redlock.InLine(r, "k") == i+1 }) // waiter i is in line before i+1 comes
	}
	defer wg.Wait()
	require.NoError(t, holder.Unlock(t.Context()))
	for want := range waiters {
		select {
		case got := <-order:
			assert.Equal(t, want, got, "woken in arrival order")
		case <-ctx.Done():
			t.Fatal("a waiter was not woken")
		}
		require.NoError(t, (<-locks).Unlock(t.Context()))
	}
}

// TestNewcomerQueuesBehindThisProcessesWaiters shows the line holding
// against the commonest barger: the worker that just released the key
// and asks for it again at once. It must not take the key back from the
// waiter its release woke.
func TestNewcomerQueuesBehindThisProcessesWaiters(t *testing.T) {
	_, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithStrategy(redlock.Retry(5, time.Hour)))
	require.NoError(t, err)
	holder, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)

	type result struct {
		who  string
		lock *redlock.Lock
		err  error
	}
	got := make(chan result, 2)
	go func() {
		l, err := s.Lock(t.Context(), "k")
		got <- result{"waiter", l, err}
	}()
	testwait.Until(t, "a waiter in line", func() bool { return redlock.Waiting(s, "k") })

	require.NoError(t, holder.Unlock(t.Context()))
	go func() { // the releasing worker wants the key again, at once
		l, err := s.Lock(t.Context(), "k")
		got <- result{"releaser", l, err}
	}()
	first := <-got
	require.NoError(t, first.err)
	assert.Equal(t, "waiter", first.who, "the waiter woken by the release gets the key, not the releaser")
	require.NoError(t, first.lock.Unlock(t.Context()))
	second := <-got
	require.NoError(t, second.err)
	assert.Equal(t, "releaser", second.who)
	require.NoError(t, second.lock.Unlock(t.Context()))
}

// TestLastReleaseRecordedForTheNextWaiter: the Unlock of a lock taken by
// a call that waited, answered by every node, is recorded for the
// locker's next waiters of the key (they ignore its announcement, which
// a subscription kept up between waits can deliver after they began:
// lines.released); the Unlock of a lock taken without waiting, or one
// that a node did not answer, is not.
func TestLastReleaseRecordedForTheNextWaiter(t *testing.T) {
	ms, bs := minis(t, 3)
	obs, waitFailures := waitingFor(t)
	lk := lockerFor(t, bs, redlock.WithTTL(time.Minute), redlock.WithObserver(obs))
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()

	plain, err := lk.Lock(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, plain.Unlock(ctx))
	assert.Empty(t, redlock.LastReleased(lk, "k"), "taken without waiting")

	waited := func(failures int64) *redlock.Lock {
		t.Helper()
		holder, err := lk.Lock(ctx, "k")
		require.NoError(t, err)
		got := make(chan *redlock.Lock, 1)
		go func() {
			l, err := lk.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			assert.NoError(t, err)
			got <- l
		}()
		waitFailures(failures)
		require.NoError(t, holder.Unlock(ctx))
		l := <-got
		require.NotNil(t, l)
		return l
	}
	l := waited(1)
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, l.Token(), redlock.LastReleased(lk, "k"), "waited, released on every node")

	l2 := waited(2)
	ms[0].Close() // one node will not answer the release
	assert.NoError(t, l2.Unlock(ctx), "released on a quorum")
	assert.Equal(t, l.Token(), redlock.LastReleased(lk, "k"), "not recorded: a node did not answer")
}

// Retry(3, d) makes at most four attempts, whether its delays run out or
// releases wake it: announcements that never free the key (another
// holder's key is set again at once) bring attempts forward, never add
// one.
func TestRetryCountsWokenAttempts(t *testing.T) {
	ms, raw := minis(t, 3)
	bs, fakes := fakenode.WrapAll(raw)
	for _, m := range ms {
		require.NoError(t, m.Set("k", "someone else"))
	}
	r, err := redlock.New(bs, redlock.WithStrategy(redlock.Retry(3, 100*time.Millisecond)))
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // "releases" every 10 ms; the key stays held
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for _, m := range ms {
					m.Publish(redlock.ReleaseChannel("k"), "released-by-someone-else")
				}
			}
		}
	})
	_, err = r.Lock(t.Context(), "k")
	close(stop)
	wg.Wait()
	require.ErrorIs(t, err, redlock.ErrTimeout)
	for i, f := range fakes {
		assert.LessOrEqual(t, f.Calls(fakenode.Acquire), 4, "node %d: a first attempt and three retries", i)
	}
	assert.Contains(t, err.Error(), "after 4 attempts")
}

// everyTenSeconds is a Strategy of the caller's own.
type everyTenSeconds struct{}

func (everyTenSeconds) Backoff(retry int) (time.Duration, bool) { return 10 * time.Second, retry < 3 }

// A Strategy of the caller's own is woken by a release as Retry is: the
// waiter takes the key long before its ten-second delay runs out.
func TestCustomStrategyIsWokenByRelease(t *testing.T) {
	_, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithStrategy(everyTenSeconds{}))
	require.NoError(t, err)
	held, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	obs, waitFailed := waitingFor(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // half the delay
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := r.Lock(ctx, "k", redlock.WithObserver(obs))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	waitFailed(1)
	require.NoError(t, held.Unlock(t.Context()))
	assert.NoError(t, <-got, "woken by the release, not by its delay")
}

// A Strategy of the caller's own stands in its locker's line as Retry
// does: a second call of the locker, finding the first waiting, makes no
// attempt of its own until its turn.
func TestCustomStrategyStandsInLine(t *testing.T) {
	_, raw := minis(t, 3)
	bs, fakes := fakenode.WrapAll(raw)
	r, err := redlock.New(bs, redlock.WithStrategy(everyTenSeconds{}))
	require.NoError(t, err)
	held, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	obs, waitFailed := waitingFor(t)
	first := startLock(ctx, r, "k", redlock.WithObserver(obs))
	testwait.Until(t, "the first waiter hears releases", func() bool { return redlock.InLine(r, "k") == 1 })
	// Its attempts are over: one before it subscribed, one after (a
	// release between them is seen by the second). Counting sooner races
	// with the second.
	waitFailed(2)
	before := fakes[0].Calls(fakenode.Acquire)
	second := startLock(ctx, r, "k")
	testwait.Until(t, "the second waiter joined the line", func() bool { return redlock.Joined(r, "k") == 2 })
	assert.Equal(t, before, fakes[0].Calls(fakenode.Acquire), "the second call made no attempt")
	require.NoError(t, held.Unlock(t.Context()))
	a := <-first
	require.NoError(t, a.err, "the first in line takes the key")
	require.NoError(t, a.l.Unlock(t.Context()))
	b := <-second
	require.NoError(t, b.err, "then the second")
	require.NoError(t, b.l.Unlock(t.Context()))
}
