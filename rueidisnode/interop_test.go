package rueidisnode

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInteropWithGoRedis: processes using the go-redis adapter and
// processes using this one can share servers and locks. A lock taken
// through one is held for the other, fence counters are shared (same
// key + ":fence"), and a release through one wakes a waiter of the other
// (same release channel and payload).
func TestInteropWithGoRedis(t *testing.T) {
	viaGoRedis, viaRueidis := bothAdapters(t)
	assert.Equal(t, viaGoRedis[0].Name(), viaRueidis[0].Name(), "one server, one name, whichever the client")
	g, r := interopRedlocks(t, viaGoRedis, viaRueidis)

	for _, tc := range []struct {
		name        string
		first, then *redlock.Redlock
	}{{"go-redis then rueidis", g, r}, {"rueidis then go-redis", r, g}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "interop:" + tc.name
			l, err := tc.first.Lock(t.Context(), key)
			require.NoError(t, err)
			_, err = tc.then.Lock(t.Context(), key)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "the lock is held for the other adapter")
			require.NoError(t, l.Unlock(t.Context()))
			next, err := tc.then.Lock(t.Context(), key)
			require.NoError(t, err, "released through one adapter, free for the other")
			assert.Equal(t, l.Fence()+1, next.Fence(), "one fence counter per key, whichever the adapter")
			require.NoError(t, next.Unlock(t.Context()))
		})
	}

	t.Run("hand-off across adapters", func(t *testing.T) {
		for _, tc := range []struct {
			name           string
			holder, waiter *redlock.Redlock
		}{{"go-redis wakes rueidis", g, r}, {"rueidis wakes go-redis", r, g}} {
			t.Run(tc.name, func(t *testing.T) {
				key := "interop:handoff:" + tc.name
				holder, err := tc.holder.Lock(t.Context(), key)
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(t.Context(), watchdog)
				defer cancel()
				var refused atomic.Int64
				obs := redlock.ObserverFunc(func(e redlock.Event) {
					if e.Kind == redlock.EventContention {
						refused.Add(1)
					}
				})
				got := make(chan error, 1)
				go func() {
					l, err := tc.waiter.Lock(ctx, key, redlock.WithStrategy(redlock.Retry(1, time.Hour)), redlock.WithObserver(obs))
					if err == nil {
						err = l.Unlock(t.Context())
					}
					got <- err
				}()
				// The first attempt, and the one made once subscribed.
				testwait.Until(t, "two refused attempts", func() bool { return refused.Load() >= 2 })
				require.NoError(t, holder.Unlock(t.Context()))
				require.NoError(t, <-got, "woken by the other adapter's release announcement")
			})
		}
	})
}

// bothAdapters starts three redis-servers and adapts each twice: through
// go-redis and through this package, as two processes would.
func bothAdapters(t *testing.T) (viaGoRedis, viaRueidis []redlock.Backend) {
	t.Helper()
	for _, addr := range redistest.Start(t, 3).Addrs() {
		g, err := goredis.New(redistest.Client(t, addr))
		require.NoError(t, err)
		viaGoRedis = append(viaGoRedis, g)
		viaRueidis = append(viaRueidis, adapt(t, client(t, addr)))
	}
	return viaGoRedis, viaRueidis
}

// interopRedlocks is a Redlock over each adapter's nodes of the same
// servers: fenced, refusing at once, TTL one minute.
func interopRedlocks(t *testing.T, viaGoRedis, viaRueidis []redlock.Backend) (g, r *redlock.Redlock) {
	t.Helper()
	opts := []redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject())}
	return newRedlock(t, viaGoRedis, opts...), newRedlock(t, viaRueidis, opts...)
}
