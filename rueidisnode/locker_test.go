package rueidisnode

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realNodes starts n redis-server processes and returns a rueidis Backend
// for each. Without redis-server on PATH the test skips, or fails when
// REDLOCK_REQUIRE_REDIS=1.
func realNodes(t *testing.T, n int) []redlock.Backend {
	t.Helper()
	bs := make([]redlock.Backend, n)
	for i, addr := range redistest.Start(t, n).Addrs() {
		bs[i] = adapt(t, client(t, addr))
	}
	return bs
}

func newRedlock(t *testing.T, bs []redlock.Backend, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	r, err := redlock.New(bs, opts...)
	require.NoError(t, err)
	return r
}

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
// announcements that the rueidis nodes deliver. Its context ends at the
// watchdog, so only a wake-up can grant it the lock.
func TestRedlockHandoff(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			var refused atomic.Int64
			obs := redlock.ObserverFunc(func(e redlock.Event) {
				if e.Kind == redlock.EventContention {
					refused.Add(1)
				}
			})
			r := newRedlock(t, realNodes(t, n), redlock.WithTTL(time.Minute), redlock.WithObserver(obs))
			holder, err := r.Lock(t.Context(), "k")
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), watchdog)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				l, err := r.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(1, time.Hour)))
				if err == nil {
					err = l.Unlock(t.Context())
				}
				got <- err
			}()
			// The first attempt, and the one made once subscribed.
			testwait.Until(t, "two refused attempts", func() bool { return refused.Load() >= 2 })
			require.NoError(t, holder.Unlock(t.Context()))
			require.NoError(t, <-got, "the waiter was woken by the release, not by its hour-long delay")
		})
	}
}

// TestRedlockFencing: successive holders of a key get increasing fencing
// tokens from a quorum of rueidis nodes.
func TestRedlockFencing(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			r := newRedlock(t, realNodes(t, n), redlock.WithTTL(5*time.Second), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
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
			assert.Equal(t, int64(1), other.Fence(), "each key has a counter of its own")
			require.NoError(t, other.Unlock(t.Context()))
		})
	}
}
