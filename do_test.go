package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// watchdog bounds a wait in a test; it guards against hangs and makes no
// timing claim.
const watchdog = testwait.Watchdog

func TestDoHoldsTheLockWhileFnRunsAndReleases(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ms, bs := minis(t, n)
			lk := lockerFor(t, bs, redlock.WithStrategy(redlock.Reject()))
			ran := false
			err := lk.Do(t.Context(), "k", func(ctx context.Context) error {
				ran = true
				for _, m := range ms {
					assert.True(t, m.Exists("k"), "the key is held while fn runs")
				}
				_, err := lk.Lock(ctx, "k")
				assert.ErrorIs(t, err, redlock.ErrNotAcquired, "and excludes others")
				return nil
			})
			require.NoError(t, err)
			assert.True(t, ran)
			for _, m := range ms {
				assert.False(t, m.Exists("k"), "released when fn returns")
			}
		})
	}
}

func TestDoReturnsFnErrorAndReleases(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs)
	require.NoError(t, err)
	boom := errors.New("boom")
	err = r.Do(t.Context(), "k", func(context.Context) error { return boom })
	assert.Same(t, boom, err, "fn's error is returned as is")
	for _, m := range ms {
		assert.False(t, m.Exists("k"))
	}
}

func TestDoDoesNotRunFnWithoutTheLock(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "other"))
	ran := false
	err = s.Do(t.Context(), "k", func(context.Context) error { ran = true; return nil })
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.False(t, ran)
	v, _ := ms[0].Get("k")
	assert.Equal(t, "other", v)
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs)
	require.NoError(t, err)
	var got any
	func() {
		defer func() { got = recover() }()
		_ = r.Do(t.Context(), "k", func(context.Context) error { panic("fn broke") })
	}()
	assert.Equal(t, "fn broke", got, "the panic reaches the caller unchanged")
	for _, m := range ms {
		assert.False(t, m.Exists("k"), "released before the panic went on")
	}
}

func TestDoReleasesWhenTheCallerCancels(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	err = r.Do(ctx, "k", func(ctx context.Context) error {
		cancel()
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled, "the caller's cancellation, not a lost lock")
		return ctx.Err()
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrLockLost)
	for _, m := range ms {
		assert.False(t, m.Exists("k"), "released on a context detached from the cancelled one")
	}
}

func TestDoBadInput(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs)
	require.NoError(t, err)
	noop := func(context.Context) error { return nil }
	cases := map[string]error{
		"nil fn":    r.Do(t.Context(), "k", nil),
		"empty key": r.Do(t.Context(), "", noop),
		//lint:ignore SA1012 a nil context is the bad input under test
		"nil ctx":             r.Do(nil, "k", noop), //nolint:staticcheck
		"zero renew interval": r.Do(t.Context(), "k", noop, redlock.WithRenewEvery(0)),
		"renew beyond validity": r.Do(t.Context(), "k", noop, redlock.WithTTL(time.Second),
			redlock.WithRenewEvery(time.Second)),
		"default interval beyond validity": r.Do(t.Context(), "k", noop, redlock.WithDriftFactor(0.9)),
	}
	for name, err := range cases {
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
	_, err = redlock.New(bs, redlock.WithRenewEvery(-time.Second))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = redlock.New(bs, redlock.WithAutoRenew(), redlock.WithDriftFactor(0.9))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "auto-renewal with a default interval beyond the validity")
	for _, m := range ms {
		assert.Empty(t, m.Keys())
	}
}

// extends counts the extensions that reached n.
func extends(n *fakenode.Node) int64 { return int64(n.Calls(fakenode.Extend)) }

func TestDoHeartbeatExtendsAndStopsWhenFnReturns(t *testing.T) {
	_, bs := minis(t, 3)
	cb, cs := onAcquire(bs, nil)
	r, err := redlock.New(cb, redlock.WithTTL(2*time.Second), redlock.WithRenewEvery(10*time.Millisecond))
	require.NoError(t, err)
	err = r.Do(t.Context(), "k", func(ctx context.Context) error {
		// Wait for a few heartbeats, however slowly the machine runs them.
		for extends(cs[0]) < 3 {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Millisecond):
			}
		}
		return nil
	})
	require.NoError(t, err)
	after := extends(cs[0])
	time.Sleep(50 * time.Millisecond) // five heartbeat periods
	assert.Equal(t, after, extends(cs[0]), "no extension after Do returned")
}

// TestDoLostLockCancelsFn: the keys vanish from a majority of the nodes
// (as when they expired or a node lost its data); the next heartbeat
// fails on quorum and fn's context is cancelled with ErrLockLost.
func TestDoLostLockCancelsFn(t *testing.T) {
	ms, bs := minis(t, 3)
	cb, cs := onAcquire(bs, nil)
	var events []redlock.Event
	var mu sync.Mutex
	obs := redlock.Observer(func(e redlock.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	r, err := redlock.New(cb, redlock.WithTTL(time.Second), redlock.WithRenewEvery(20*time.Millisecond), redlock.WithObserver(obs))
	require.NoError(t, err)
	var cause error
	err = r.Do(t.Context(), "k", func(ctx context.Context) error {
		before := extends(cs[0])
		ms[0].Del("k")
		ms[1].Del("k")
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			// Within one heartbeat: the round in flight when the keys
			// vanished (which may still have succeeded) and the next.
			assert.LessOrEqual(t, extends(cs[0])-before, int64(2), "extension rounds before fn was cancelled")
			return ctx.Err()
		case <-time.After(watchdog):
			return errors.New("fn was not cancelled")
		}
	})
	assert.ErrorIs(t, cause, redlock.ErrLockLost)
	assert.ErrorIs(t, cause, redlock.ErrNotHeld, "the failed extension is in the cause")
	assert.ErrorIs(t, err, redlock.ErrLockLost, "Do reports the loss")
	assert.ErrorIs(t, err, context.Canceled, "joined with fn's error")
	assert.False(t, ms[2].Exists("k"), "the remaining key is released")
	mu.Lock()
	defer mu.Unlock()
	var lost int
	for _, e := range events {
		if e.Kind == redlock.EventLost {
			lost++
			assert.ErrorIs(t, e.Err, redlock.ErrLockLost)
		}
	}
	assert.Equal(t, 1, lost, "one EventLost")
}

// TestDoValidityRunsOutWhileAnExtensionHangs: every node's extension hangs
// and ignores its context (a broken Backend). fn must still be cancelled
// when validity runs out, without waiting for the extension.
func TestDoValidityRunsOutWhileAnExtensionHangs(t *testing.T) {
	_, bs := minis(t, 3)
	cb, cs := onAcquire(bs, nil)
	unblock := make(chan struct{})
	for _, c := range cs {
		c.SetHook(func(ctx context.Context, call fakenode.Call) fakenode.Result {
			if call.Op != fakenode.Extend {
				return call.Send(ctx)
			}
			<-unblock // hangs, ignoring its context
			return fakenode.Result{Err: errors.New("late")}
		})
	}
	r, err := redlock.New(cb, redlock.WithTTL(200*time.Millisecond), redlock.WithRenewEvery(10*time.Millisecond))
	require.NoError(t, err)
	done := make(chan error, 1)
	var cause error
	go func() {
		done <- r.Do(t.Context(), "k", func(ctx context.Context) error {
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				close(unblock) // only now let the hung extension return
				return nil
			case <-time.After(watchdog):
				close(unblock)
				return errors.New("fn was not cancelled while the extension hung")
			}
		})
	}()
	err = <-done
	assert.ErrorIs(t, cause, redlock.ErrLockLost)
	assert.Contains(t, cause.Error(), "validity ran out")
	assert.ErrorIs(t, err, redlock.ErrLockLost)
}

func TestAutoRenewAndLost(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithTTL(2*time.Second), redlock.WithRenewEvery(10*time.Millisecond))
	require.NoError(t, err)

	l, err := r.Lock(t.Context(), "k", redlock.WithAutoRenew())
	require.NoError(t, err)
	first := l.Until()
	testwait.Until(t, `l.Until().After(first)`, func() bool { return l.Until().After(first) }) // the heartbeat extended it
	select {
	case <-l.Lost():
		t.Fatal("Lost closed while the lock is held")
	default:
	}
	for _, m := range ms[:2] {
		m.Del("k")
	}
	select {
	case <-l.Lost():
	case <-time.After(watchdog):
		t.Fatal("Lost not closed after the keys vanished")
	}
	assert.ErrorIs(t, l.Extend(t.Context(), 2*time.Second), redlock.ErrNotHeld, "a lost lock is not extended again")
	assert.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld)

	// Unlock closes Lost too, and stops the heartbeat.
	l, err = r.Lock(t.Context(), "k2", redlock.WithAutoRenew())
	require.NoError(t, err)
	lost := l.Lost()
	require.NoError(t, l.Unlock(t.Context()))
	select {
	case <-lost:
	default:
		t.Fatal("Unlock did not close Lost")
	}
}

// TestLostAskedForLate: a lock makes its Lost channel when first asked
// for it; asked for only after Unlock, or after the heartbeat lost the
// lock, it is closed all the same.
func TestLostAskedForLate(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(2*time.Second), redlock.WithRenewEvery(10*time.Millisecond))
	require.NoError(t, err)

	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.True(t, closed(l.Lost()), "Lost after Unlock")

	err = s.Do(t.Context(), "k", func(ctx context.Context) error {
		ms[0].Del("k") // the next extension fails: the heartbeat loses the lock
		select {
		case <-ctx.Done():
		case <-time.After(watchdog):
			t.Fatal("the loss did not cancel the function")
		}
		l, ok := redlock.FromContext(ctx)
		require.True(t, ok)
		assert.True(t, closed(l.Lost()), "Lost after the loss")
		return nil
	})
	require.ErrorIs(t, err, redlock.ErrLockLost)
}

func TestLostWithoutRenewalClosesWhenValidityRunsOut(t *testing.T) {
	_, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(100*time.Millisecond))
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	select {
	case <-l.Lost():
	case <-time.After(watchdog):
		t.Fatal("Lost not closed after validity ran out")
	}
	assert.False(t, time.Now().Before(l.Until()), "closed only once Until passed")
	assert.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld)
}

// TestRealServersDoOutlivesThreeTTLs: real servers expire keys on their
// own; under Do the lock survives work lasting several TTLs, and excludes
// others throughout.
func TestRealServersDoOutlivesThreeTTLs(t *testing.T) {
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			// The node timeout is generous for a loaded machine: the test
			// is about renewal, not about slow nodes.
			const ttl = 800 * time.Millisecond
			lk := lockerFor(t, bs, redlock.WithTTL(ttl), redlock.WithNodeTimeout(250*time.Millisecond), redlock.WithStrategy(redlock.Reject()))
			start := time.Now()
			refused := 0
			err := lk.Do(t.Context(), "long", func(ctx context.Context) error {
				for time.Since(start) < 7*ttl/2 {
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-time.After(ttl / 2):
					}
					_, err := lk.Lock(t.Context(), "long")
					if !errors.Is(err, redlock.ErrNotAcquired) {
						return fmt.Errorf("another locker got in: %v", err)
					}
					refused++
				}
				return nil
			})
			require.NoError(t, err)
			assert.GreaterOrEqual(t, refused, 6)
			l, err := lk.Lock(t.Context(), "long")
			require.NoError(t, err, "released at the end")
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

// TestRealServersDoLosesLockWhenAMajorityDies: with three of five masters
// killed, the next heartbeat cannot reach a quorum and fn is cancelled
// with ErrLockLost.
func TestRealServersDoLosesLockWhenAMajorityDies(t *testing.T) {
	c, bs := realNodes(t, 5)
	r, err := redlock.New(bs, redlock.WithTTL(2*time.Second), redlock.WithNodeTimeout(200*time.Millisecond),
		redlock.WithRenewEvery(50*time.Millisecond))
	require.NoError(t, err)
	var cause error
	err = r.Do(t.Context(), "k", func(ctx context.Context) error {
		for _, s := range c.Servers[:3] {
			s.Kill()
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(watchdog):
		}
		return nil
	})
	require.ErrorIs(t, cause, redlock.ErrLockLost)
	assert.ErrorIs(t, cause, redlock.ErrUnavailable, "the cause says the nodes did not answer")
	assert.ErrorIs(t, err, redlock.ErrLockLost)
}

// TestLostFollowsExtend: without a heartbeat, Lost's timer follows the
// validity that Extend moves.
func TestLostFollowsExtend(t *testing.T) {
	_, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(200*time.Millisecond))
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	lost := l.Lost()
	require.NoError(t, l.Extend(t.Context(), 5*time.Second))
	select {
	case <-lost:
		t.Fatal("Lost closed at the old validity")
	case <-time.After(600 * time.Millisecond): // three old TTLs; the new validity is ~5 s
	}
	require.NoError(t, l.Unlock(t.Context()))
	select {
	case <-lost:
	default:
		t.Fatal("Unlock did not close Lost")
	}
}

// TestRealServersDoLosesLockWhenAMajorityStalls: three of five masters
// are paused (SIGSTOP), so extensions hang until the node timeout; fn is
// cancelled with ErrLockLost all the same.
func TestRealServersDoLosesLockWhenAMajorityStalls(t *testing.T) {
	c, bs := realNodes(t, 5)
	r, err := redlock.New(bs, redlock.WithTTL(2*time.Second), redlock.WithNodeTimeout(200*time.Millisecond),
		redlock.WithRenewEvery(50*time.Millisecond))
	require.NoError(t, err)
	defer func() {
		for _, s := range c.Servers[:3] {
			s.Resume()
		}
	}()
	var cause error
	err = r.Do(t.Context(), "k", func(ctx context.Context) error {
		for _, s := range c.Servers[:3] {
			s.Pause()
		}
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(watchdog):
		}
		return nil
	})
	require.ErrorIs(t, cause, redlock.ErrLockLost)
	assert.ErrorIs(t, err, redlock.ErrLockLost)
	var qe *redlock.QuorumError
	require.ErrorAs(t, cause, &qe, "the cause carries what each node said")
	assert.Len(t, qe.Failed, 3)
}

// TestDoHandsFnItsLock: fn finds the lock Do holds in its context, with
// the fencing token the nodes issued; outside Do there is none.
func TestDoHandsFnItsLock(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithFencing())
	require.NoError(t, err)
	_, ok := redlock.FromContext(t.Context())
	assert.False(t, ok, "no lock outside Do")
	var last int64
	for range 2 {
		err = r.Do(t.Context(), "k", func(ctx context.Context) error {
			l, ok := redlock.FromContext(context.WithValue(ctx, struct{}{}, "derived"))
			require.True(t, ok)
			assert.Equal(t, "k", l.Key())
			assert.Greater(t, l.Fence(), last, "the token of this holder, above the last")
			last = l.Fence()
			v, _ := ms[0].Get("k")
			assert.Equal(t, l.Token(), v, "the lock the nodes hold")
			return nil
		})
		require.NoError(t, err)
	}
}
