package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLockUnlockSingle(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(time.Second))
	require.NoError(t, err)

	l, err := s.Lock(t.Context(), "order:1")
	require.NoError(t, err)
	got, err := ms[0].Get("order:1")
	require.NoError(t, err)
	assert.Equal(t, l.Token(), got)
	assert.Equal(t, time.Second, ms[0].TTL("order:1"), "SET must carry the TTL in the same command")
	u, err := uuid.Parse(l.Token())
	require.NoError(t, err)
	assert.Equal(t, uuid.Version(4), u.Version())

	require.NoError(t, l.Unlock(t.Context()))
	assert.False(t, ms[0].Exists("order:1"))
	assert.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld, "second Unlock")
}

func TestTokensAreUniquePerAcquisition(t *testing.T) {
	_, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0])
	require.NoError(t, err)
	seen := map[string]bool{}
	for range 50 {
		l, err := s.Lock(t.Context(), "k")
		require.NoError(t, err)
		assert.False(t, seen[l.Token()], "token reused")
		seen[l.Token()] = true
		require.NoError(t, l.Unlock(t.Context()))
	}
}

func TestRejectFailsAtOnce(t *testing.T) {
	ms, bs := minis(t, 1)
	hb, hs := onAcquire(bs, nil)
	clk := newFakeClock()
	s, err := redlock.NewSingle(hb[0], redlock.WithStrategy(redlock.Reject()), redlock.WithClock(clk))
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "someone-else"))

	_, err = s.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.NotErrorIs(t, err, redlock.ErrTimeout)
	assert.NotErrorIs(t, err, redlock.ErrUnavailable)
	assert.Equal(t, 1, hs[0].Calls(fakenode.Acquire))
	assert.Empty(t, clk.Delays())
	v, _ := ms[0].Get("k")
	assert.Equal(t, "someone-else", v, "a refused attempt must not touch the holder's key")
}

func TestRetryDelaysDoubleThenTimeout(t *testing.T) {
	ms, bs := minis(t, 1)
	hb, hs := onAcquire(bs, nil)
	clk := newFakeClock()
	s, err := redlock.NewSingle(hb[0], redlock.WithClock(clk)) // default Retry(3, 100ms)
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "someone-else"))

	_, err = s.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrTimeout)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, ms[0].Addr(), qe.Failed[0].Node)
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, clk.Delays())
	assert.Equal(t, 4, hs[0].Calls(fakenode.Acquire), "one attempt plus three retries")
}

func TestRetryCustomDelays(t *testing.T) {
	ms, bs := minis(t, 1)
	clk := newFakeClock()
	s, err := redlock.NewSingle(bs[0], redlock.WithClock(clk))
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "x"))
	_, err = s.Lock(t.Context(), "k", redlock.WithStrategy(redlock.Retry(5, 7*time.Millisecond)), redlock.WithHandoff(false))
	assert.ErrorIs(t, err, redlock.ErrTimeout)
	assert.Equal(t, []time.Duration{7, 14, 28, 56, 112}, scale(clk.Delays(), time.Millisecond))
	assert.Contains(t, err.Error(), "after 6 attempts")

	// With hand-off the attempt made once subscribed, which catches a
	// release it could not hear, is one of the six: the call gives up
	// once they are spent, before its last delay.
	clk = newFakeClock()
	s, err = redlock.NewSingle(bs[0], redlock.WithClock(clk))
	require.NoError(t, err)
	_, err = s.Lock(t.Context(), "k", redlock.WithStrategy(redlock.Retry(5, 7*time.Millisecond)))
	assert.ErrorIs(t, err, redlock.ErrTimeout)
	assert.Equal(t, []time.Duration{7, 14, 28, 56}, scale(clk.Delays(), time.Millisecond))
	assert.Contains(t, err.Error(), "after 6 attempts")
}

func scale(ds []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d / unit
	}
	return out
}

func TestRetryAcquiresOnceReleased(t *testing.T) {
	ms, bs := minis(t, 3)
	clk := newFakeClock()
	clk.onAfter = func(n int) {
		if n == 2 { // the holder lets go during the second wait
			for _, m := range ms {
				m.Del("k")
			}
		}
	}
	r, err := redlock.New(bs, redlock.WithClock(clk))
	require.NoError(t, err)
	for _, m := range ms {
		require.NoError(t, m.Set("k", "holder"))
	}
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	assert.Len(t, clk.Delays(), 2)
	for _, m := range ms {
		v, _ := m.Get("k")
		assert.Equal(t, l.Token(), v)
	}
}

func TestRetryBackoffSaturates(t *testing.T) {
	d, ok := redlock.Retry(100, time.Hour).Backoff(99)
	assert.True(t, ok)
	assert.Positive(t, d, "overflowing delays saturate instead of wrapping negative")
	_, ok = redlock.Retry(2, time.Millisecond).Backoff(2)
	assert.False(t, ok)
}

func TestRollbackAfterPartialAcquisition(t *testing.T) {
	ms, bs := minis(t, 5)
	r, err := redlock.New(bs, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	for _, m := range ms[2:] { // someone else holds 3 of 5
		require.NoError(t, m.Set("k", "other"))
	}
	_, err = r.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 2, qe.Granted)
	assert.Equal(t, 3, qe.Quorum)
	assert.Len(t, qe.Failed, 3)
	for _, f := range qe.Failed {
		assert.ErrorIs(t, f.Err, redlock.ErrNotAcquired)
	}
	for _, m := range ms[:2] {
		assert.False(t, m.Exists("k"), "the two keys we got must be rolled back at once")
	}
	for _, m := range ms[2:] {
		v, _ := m.Get("k")
		assert.Equal(t, "other", v)
	}
}

func TestRollbackReachesNodesThatTimedOut(t *testing.T) {
	ms, bs := minis(t, 3)
	late := fakenode.Wrap(bs[0]) // sets the key, then the reply is lost
	late.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		r := c.Send(ctx)
		if c.Op == fakenode.Acquire && r.Err == nil {
			return fakenode.Result{Err: context.DeadlineExceeded}
		}
		return r
	})
	bs[0] = fakenode.Silent(late)
	require.NoError(t, ms[1].Set("k", "other"))
	require.NoError(t, ms[2].Set("k", "other"))
	r, err := redlock.New(bs, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	_, err = r.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.False(t, ms[0].Exists("k"), "a node whose reply was lost may hold our key: it must be released too")
}

func TestReleaseNeverDeletesNewHoldersKey(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	a, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	ms[0].FastForward(2 * time.Second) // A's key expires on the node
	b, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)

	assert.ErrorIs(t, a.Unlock(t.Context()), redlock.ErrNotHeld)
	v, err := ms[0].Get("k")
	require.NoError(t, err)
	assert.Equal(t, b.Token(), v, "A's release must leave B's key alone")
	assert.ErrorIs(t, a.Extend(t.Context(), time.Second), redlock.ErrNotHeld)
	v, _ = ms[0].Get("k")
	assert.Equal(t, b.Token(), v)
	require.NoError(t, b.Unlock(t.Context()))
}

func TestUnlockSurvivesCancelledContext(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	l, err := r.Lock(ctx, "k")
	require.NoError(t, err)
	cancel()
	require.NoError(t, l.Unlock(ctx))
	for _, m := range ms {
		assert.False(t, m.Exists("k"))
	}
}

func TestExtend(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithTTL(time.Second))
	require.NoError(t, err)
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	before := l.Until()

	require.NoError(t, l.Extend(t.Context(), 5*time.Second))
	for _, m := range ms {
		assert.Equal(t, 5*time.Second, m.TTL("k"))
	}
	assert.True(t, l.Until().After(before))

	// One node lost our key: 2 of 3 is still a quorum.
	ms[0].Del("k")
	require.NoError(t, l.Extend(t.Context(), 5*time.Second))
	assert.False(t, ms[0].Exists("k"), "Extend must never re-create a key")

	// Two lost it: no quorum, and nothing is re-created.
	ms[1].Del("k")
	err = l.Extend(t.Context(), 5*time.Second)
	assert.ErrorIs(t, err, redlock.ErrNotHeld)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, "extend", qe.Op)
	assert.Equal(t, 1, qe.Granted)
	assert.False(t, ms[0].Exists("k"))
	assert.False(t, ms[1].Exists("k"))

	assert.ErrorIs(t, l.Extend(t.Context(), 0), redlock.ErrInvalid)
	require.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld, "only one of three nodes still had our key")
	assert.ErrorIs(t, l.Extend(t.Context(), time.Second), redlock.ErrNotHeld, "extend after unlock")
}

func TestUnavailableWhenTooFewNodesAnswer(t *testing.T) {
	ms, bs := minis(t, 5)
	r, err := redlock.New(bs, redlock.WithStrategy(redlock.Reject()), redlock.WithTTL(time.Second))
	require.NoError(t, err)
	addr0 := ms[0].Addr()
	ms[0].Close()
	ms[1].Close()
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err, "two of five nodes down still leaves a quorum")
	require.NoError(t, l.Unlock(t.Context()))

	ms[2].Close()
	_, err = r.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrUnavailable)
	assert.NotErrorIs(t, err, redlock.ErrNotAcquired, "unavailable must be told apart from busy")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Len(t, qe.Failed, 3)
	assert.Contains(t, err.Error(), addr0, "the error names the failed nodes")

	// With retries the error is still ErrUnavailable, not ErrTimeout.
	_, err = r.Lock(t.Context(), "k", redlock.WithStrategy(redlock.Retry(2, time.Millisecond)))
	assert.ErrorIs(t, err, redlock.ErrUnavailable)
	assert.NotErrorIs(t, err, redlock.ErrTimeout)
}

func TestCancelWhileWaiting(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithStrategy(redlock.Retry(10, time.Hour)))
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "other"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, "k")
		done <- err
	}()
	cancel()
	err = <-done // an hour-long backoff returns as soon as ctx ends
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.Canceled)

	dctx, dcancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer dcancel()
	_, err = s.Lock(dctx, "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestLockOptionsOverrideDefaults(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(time.Second))
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k", redlock.WithTTL(3*time.Second))
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, ms[0].TTL("k"))
	require.NoError(t, l.Unlock(t.Context()))
	l, err = s.Lock(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, time.Second, ms[0].TTL("k"), "a per-call option must not change the defaults")
	require.NoError(t, l.Unlock(t.Context()))
}

func TestBadInput(t *testing.T) {
	ms, bs := minis(t, 3)
	good := bs[0]
	dup := node(t, redistest.Client(t, ms[0].Addr()))

	ctors := []struct {
		name  string
		nodes []driver.Node
		opts  []redlock.Option
	}{
		{"no nodes", nil, nil},
		{"nil node", []driver.Node{good, nil}, nil},
		{"duplicate node", []driver.Node{good, dup}, nil},
		{"zero TTL", bs, []redlock.Option{redlock.WithTTL(0)}},
		{"negative TTL", bs, []redlock.Option{redlock.WithTTL(-time.Second)}},
		{"sub-millisecond TTL", bs, []redlock.Option{redlock.WithTTL(time.Microsecond)}},
		{"TTL within drift", bs, []redlock.Option{redlock.WithTTL(2 * time.Millisecond)}},
		{"drift factor 1", bs, []redlock.Option{redlock.WithDriftFactor(1)}},
		{"negative drift factor", bs, []redlock.Option{redlock.WithDriftFactor(-0.1)}},
		{"nil strategy", bs, []redlock.Option{redlock.WithStrategy(nil)}},
		{"negative retries", bs, []redlock.Option{redlock.WithStrategy(redlock.Retry(-1, time.Millisecond))}},
		{"negative delay", bs, []redlock.Option{redlock.WithStrategy(redlock.Retry(1, -time.Millisecond))}},
		{"nil clock", bs, []redlock.Option{redlock.WithClock(nil)}},
		{"node timeout not below TTL", bs, []redlock.Option{redlock.WithTTL(time.Second), redlock.WithNodeTimeout(time.Second)}},
		{"negative node timeout", bs, []redlock.Option{redlock.WithNodeTimeout(-1)}},
		{"zero node timeout", bs, []redlock.Option{redlock.WithNodeTimeout(0)}},
	}
	for _, c := range ctors {
		t.Run(c.name, func(t *testing.T) {
			_, err := redlock.New(c.nodes, c.opts...)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			if len(c.nodes) == 1 {
				_, err = redlock.NewSingle(c.nodes[0], c.opts...)
				assert.ErrorIs(t, err, redlock.ErrInvalid)
			}
			if len(c.nodes) > 1 && c.opts != nil { // the same options given per call
				r, err := redlock.New(c.nodes)
				require.NoError(t, err)
				_, err = r.Lock(t.Context(), "k", c.opts...)
				assert.ErrorIs(t, err, redlock.ErrInvalid)
			}
		})
	}

	r, err := redlock.New(bs)
	require.NoError(t, err)
	_, err = r.Lock(t.Context(), "")
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err = r.Lock(nil, "k") //nolint:staticcheck
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	for _, m := range ms {
		assert.Empty(t, m.Keys(), "bad input must not touch the nodes")
	}

	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	//lint:ignore SA1012 a nil context is the bad input under test
	err = l.Unlock(nil) //nolint:staticcheck
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a nil context is reported...")
	for _, m := range ms {
		assert.False(t, m.Exists("k"), "...after the lock was released anyway")
	}

	_, err = redlock.NewSingle(good, redlock.WithDriftFactor(0.5), redlock.WithTTL(4*time.Millisecond)) // drift 4 ms
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "drift")
}

func TestEvenNodeCountWorks(t *testing.T) {
	ms, bs := minis(t, 4)
	r, err := redlock.New(bs, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	ms[0].Close()
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err, "4 nodes need 3: one may fail")
	require.NoError(t, l.Unlock(t.Context()))
	ms[1].Close()
	_, err = r.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrUnavailable, "4 nodes tolerate no more failures than 3 do")
}

func TestQuorumRule(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, redlock.Quorum(n), "N=%d", n)
	}
}

func TestErrorsCompose(t *testing.T) {
	assert.True(t, errors.Is(redlock.ErrTimeout, redlock.ErrNotAcquired))
	assert.False(t, errors.Is(redlock.ErrNotAcquired, redlock.ErrTimeout))
	assert.False(t, errors.Is(redlock.ErrUnavailable, redlock.ErrNotAcquired))
}

// A lock prints, and logs, its key, validity and fence, never its token:
// the token is what lets anyone release it.
func TestLockPrintsNoToken(t *testing.T) {
	_, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithFencing())
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "order:1")
	require.NoError(t, err)
	defer l.Unlock(t.Context())
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("held", "lock", l)
	for _, out := range []string{fmt.Sprint(l), fmt.Sprintf("%v %+v %#v %s %q", l, l, l, l, l), logs.String()} {
		assert.NotContains(t, out, l.Token())
		assert.Contains(t, out, "order:1")
	}
	assert.Contains(t, logs.String(), `"fence":1`)
}

// A key longer than the documented maximum is refused before any node
// sees it, and the error quotes it shortened.
func TestLongKeyRefused(t *testing.T) {
	_, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0])
	require.NoError(t, err)
	_, err = s.Lock(t.Context(), strings.Repeat("k", redlock.MaxKeyLen))
	require.NoError(t, err, "the maximum itself is allowed")
	huge := strings.Repeat("x", 1<<20)
	_, err = s.Lock(t.Context(), huge)
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Less(t, len(err.Error()), 300, "the key is quoted shortened")
	_, err = s.LockMany(t.Context(), []string{"a", huge})
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Less(t, len(err.Error()), 300)
}
