package redlock_test

import (
	"github.com/quorumlock/redlock/driver"
	"testing"
	"time"

	"github.com/quorumlock/redlock"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowNodes makes every acquire on the nodes advance clk by d, as if the
// round took that long. The fan-out is concurrent, so only node 0 moves
// the clock: the round takes d in all.
func slowNodes(bs []driver.Node, clk *fakeClock, d time.Duration) []driver.Node {
	nodes, _ := onAcquire(bs, func() { clk.Advance(d) })
	return nodes
}

func TestValidityArithmetic(t *testing.T) {
	const ttl = 10 * time.Second
	cases := []struct {
		name    string
		factor  float64
		elapsed time.Duration
		drift   time.Duration // ttl·factor + 2 ms
	}{
		{"default factor, instant", 0.01, 0, 102 * time.Millisecond},
		{"default factor, 300ms round", 0.01, 300 * time.Millisecond, 102 * time.Millisecond},
		{"zero factor leaves 2ms", 0, 1500 * time.Millisecond, 2 * time.Millisecond},
		{"factor near 1", 0.99, 50 * time.Millisecond, 9902 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, bs := minis(t, 3)
			clk := newFakeClock()
			start := clk.Now()
			// The node timeout must fit in the validity: 60 ms does for
			// every case.
			r, err := redlock.New(slowNodes(bs, clk, c.elapsed), redlock.WithTTL(ttl), redlock.WithDriftFactor(c.factor), redlock.WithClock(clk),
				redlock.WithNodeTimeout(60*time.Millisecond))
			require.NoError(t, err)
			l, err := r.Lock(t.Context(), "k")
			require.NoError(t, err)
			assert.Equal(t, start.Add(ttl-c.drift), l.Until(), "until = start + TTL − drift")
			assert.Equal(t, ttl-c.elapsed-c.drift, l.Until().Sub(clk.Now()), "validity = TTL − elapsed − drift")
			require.NoError(t, l.Unlock(t.Context()))
		})
	}
}

func TestValidityBoundary(t *testing.T) {
	const ttl = time.Second
	drift := redlock.DriftFor(ttl, redlock.DefaultDriftFactor) // 12 ms
	for _, c := range []struct {
		elapsed time.Duration
		granted bool
	}{
		{ttl - drift - time.Millisecond, true},
		{ttl - drift, false}, // exactly zero validity is not a lock
		{ttl - drift + time.Millisecond, false},
	} {
		ms, bs := minis(t, 3)
		clk := newFakeClock()
		r, err := redlock.New(slowNodes(bs, clk, c.elapsed), redlock.WithTTL(ttl), redlock.WithClock(clk), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		l, err := r.Lock(t.Context(), "k")
		if c.granted {
			require.NoError(t, err, "elapsed %v", c.elapsed)
			assert.Equal(t, time.Millisecond, l.Until().Sub(clk.Now()))
			continue
		}
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "elapsed %v", c.elapsed)
		for _, m := range ms {
			assert.False(t, m.Exists("k"), "a lock with no validity left is rolled back everywhere")
		}
	}
}

func TestSlowAcquisitionThatUsedUpTheTTLIsRolledBack(t *testing.T) {
	ms, bs := minis(t, 5)
	clk := newFakeClock()
	r, err := redlock.New(slowNodes(bs, clk, 2*time.Second), redlock.WithTTL(time.Second), redlock.WithClock(clk),
		redlock.WithStrategy(redlock.Retry(2, 10*time.Millisecond)))
	require.NoError(t, err)

	_, err = r.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 5, qe.Granted, "every node said yes...")
	assert.Negative(t, qe.Validity, "...but the round outlived the TTL")
	assert.Contains(t, qe.Error(), "validity ran out")
	for _, m := range ms {
		assert.False(t, m.Exists("k"))
	}
}

func TestExtendValidityStartsFromTheExtension(t *testing.T) {
	_, bs := minis(t, 3)
	clk := newFakeClock()
	r, err := redlock.New(bs, redlock.WithTTL(time.Second), redlock.WithClock(clk))
	require.NoError(t, err)
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)

	clk.Advance(500 * time.Millisecond)
	start := clk.Now()
	require.NoError(t, l.Extend(t.Context(), 4*time.Second))
	assert.Equal(t, start.Add(4*time.Second-redlock.DriftFor(4*time.Second, redlock.DefaultDriftFactor)), l.Until())

	clk.Advance(5 * time.Second) // past validity: no extension, even though the keys are still there
	assert.ErrorIs(t, l.Extend(t.Context(), 4*time.Second), redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld, "Unlock after validity says the lock was not held to the end")
}

// TestDriftBeyondTheFactorBreaksSafety shows the assumption Redlock rests on
// and what happens without it: two of three nodes whose clocks run ahead of
// the client's by more than the drift allowance expire the key while the
// holder still believes it is valid, and a second client takes the lock.
func TestDriftBeyondTheFactorBreaksSafety(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs, redlock.WithTTL(10*time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	a, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)

	// Within the allowance (100 ms of a 10 s TTL): nothing expires early.
	for _, m := range ms[:2] {
		m.FastForward(9*time.Second + 890*time.Millisecond)
	}
	_, err = r.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "drift within the factor keeps the lock safe")

	// Beyond it: the fast clocks pass the TTL while the holder's has barely moved.
	for _, m := range ms[:2] {
		m.FastForward(200 * time.Millisecond)
	}
	b, err := r.Lock(t.Context(), "k")
	require.NoError(t, err, "with the assumption broken a second holder gets in")
	assert.True(t, time.Now().Before(a.Until()), "while the first still believes it holds the lock")
	assert.NotEqual(t, a.Token(), b.Token())
}
