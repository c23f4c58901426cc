package rueidisnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedlockContention runs goroutines that each increment a shared
// counter non-atomically (load, yield, store) under a Redlock of rueidis
// nodes: any overlap loses an update, so the exact final count proves
// mutual exclusion.
func TestRedlockContention(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			r := newRedlock(t, realNodes(t, n), redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(30, time.Millisecond)))
			locktest.Counter(t, r, "counter", 8, 25, nil)
		})
	}
}

// TestRedlockHandoff: a waiter whose next retry is an hour away gets the
// lock as soon as the holder releases it, woken by the release
// announcements that the rueidis nodes deliver.
func TestRedlockHandoff(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			obs, refused := contention()
			r := newRedlock(t, realNodes(t, n), redlock.WithTTL(time.Minute), obs)
			handedOff(t, r, r, refused, "handoff", nil)
		})
	}
}

// TestLastRetryIsNotSleptOut: a waiter of another locker (as in another
// process) with one retry an hour away makes its first attempt and one
// more once subscribed; the holder then releases. Whether that second
// attempt counted as its retry or not, the call must end at once: with
// the lock (a release woke its retry) or with ErrTimeout (no retry left),
// never by sitting out a delay after which it may not attempt.
func TestLastRetryIsNotSleptOut(t *testing.T) {
	nodes := realNodes(t, 1)
	holderLk := newSingle(t, nodes[0], redlock.WithTTL(time.Minute))
	obs, refused := contention()
	waiterLk := newSingle(t, serverNode(t, nodes[0].Info().Name), redlock.WithTTL(time.Minute), obs)
	holder, err := holderLk.Lock(t.Context(), "last-retry")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := waiterLk.Lock(ctx, "last-retry", redlock.WithStrategy(redlock.Retry(1, time.Hour)))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	testwait.Until(t, "two refused attempts", func() bool { return refused.Load() >= 2 })
	require.NoError(t, holder.Unlock(t.Context()))
	if err := <-got; err != nil {
		require.NoError(t, ctx.Err(), "the call sat out an hour-long delay with no attempt after it: %v", err)
		require.ErrorIs(t, err, redlock.ErrTimeout, "no retry left")
	}
}

// TestRedlockFencing: successive holders of a key get increasing fencing
// tokens from a quorum of rueidis nodes.
func TestRedlockFencing(t *testing.T) {
	r := newRedlock(t, realNodes(t, 3), redlock.WithTTL(5*time.Second), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
	last := int64(0)
	for range 5 {
		l, err := r.Lock(t.Context(), "fenced")
		require.NoError(t, err)
		assert.Greater(t, l.Fence(), last, "each holder's token is above the last one's")
		last = l.Fence()
		require.NoError(t, l.Unlock(t.Context()))
	}
	other, err := r.Lock(t.Context(), "other")
	require.NoError(t, err)
	again, err := r.Lock(t.Context(), "fenced")
	require.NoError(t, err)
	assert.Equal(t, last+1, again.Fence(), "each key has a counter of its own")
	require.NoError(t, again.Unlock(t.Context()))
	require.NoError(t, other.Unlock(t.Context()))
}

// TestPrimitives runs every primitive of the core over rueidis nodes (a
// Redlock of three): each is scripts of the core that the adapter only
// runs, so none needed adapter code.
func TestPrimitives(t *testing.T) {
	primitives(t, realNodes(t, 3))
}

// primitives checks each primitive briefly over nodes; the core's own
// tests check them in depth.
func primitives(t *testing.T, nodes []driver.Node) {
	r := newRedlock(t, nodes, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(100, time.Millisecond)))
	reject := redlock.WithStrategy(redlock.Reject())
	t.Run("LockMany", func(t *testing.T) {
		tag := fresh("many") // one hash slot, for a cluster node
		a, b := "{"+tag+"}:a", "{"+tag+"}:b"
		set, err := r.LockMany(t.Context(), []string{b, a}, redlock.WithFencing())
		require.NoError(t, err)
		require.Len(t, set.Fences(), 2)
		assert.Positive(t, set.Fences()[0])
		assert.Positive(t, set.Fences()[1])
		_, err = r.Lock(t.Context(), a, reject)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "a key of a held set")
		require.NoError(t, set.Extend(t.Context(), time.Minute))
		require.NoError(t, set.Unlock(t.Context()))
		l, err := r.Lock(t.Context(), a, reject)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	})
	t.Run("ReadWrite", func(t *testing.T) {
		key := fresh("rw")
		r1, err := r.RLock(t.Context(), key)
		require.NoError(t, err)
		r2, err := r.RLock(t.Context(), key)
		require.NoError(t, err, "readers share")
		_, err = r.WLock(t.Context(), key, reject)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "readers exclude the writer")
		require.NoError(t, r1.Unlock(t.Context()))
		require.NoError(t, r2.Unlock(t.Context()))
		w, err := r.WLock(t.Context(), key, reject)
		require.NoError(t, err)
		_, err = r.RLock(t.Context(), key, reject)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "the writer excludes readers")
		require.NoError(t, w.Unlock(t.Context()))
	})
	t.Run("Semaphore", func(t *testing.T) {
		sem, err := redlock.NewSemaphore(r, fresh("sem"), 2)
		require.NoError(t, err)
		locktest.Permits(t, sem, 4, 5, nil)
	})
	t.Run("Election", func(t *testing.T) {
		e, err := redlock.NewElection(r, fresh("election"))
		require.NoError(t, err)
		lead, err := e.Campaign(t.Context(), "me")
		require.NoError(t, err)
		got, err := e.Leader(t.Context())
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Value: "me", Term: lead.Term()}, got)
		require.NoError(t, lead.Resign(t.Context()))
	})
	t.Run("Fairness", func(t *testing.T) {
		fair := newRedlock(t, nodes, redlock.WithTTL(5*time.Second), redlock.WithFairness(true),
			redlock.WithStrategy(redlock.Retry(100, 10*time.Millisecond)))
		locktest.Counter(t, fair, fresh("fair"), 4, 5, nil)
	})
	t.Run("Do", func(t *testing.T) {
		ran := false
		require.NoError(t, r.Do(t.Context(), fresh("do"), func(ctx context.Context) error {
			_, ok := redlock.FromContext(ctx)
			ran = ok
			return nil
		}))
		assert.True(t, ran)
	})
}
