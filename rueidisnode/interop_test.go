package rueidisnode

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInteropWithGoRedis: processes using the go-redis adapter and
// processes using this one share servers and locks, since both run the
// core's scripts on the same keys and channels: a lock or set taken
// through one is held for the other, fence counters are shared, and a
// release through one wakes a waiter of the other.
func TestInteropWithGoRedis(t *testing.T) {
	var viaGoRedis, viaRueidis []driver.Node
	for _, addr := range redistest.Start(t, 3).Addrs() {
		viaGoRedis = append(viaGoRedis, goredisNode(t, redistest.Client(t, addr)))
		viaRueidis = append(viaRueidis, serverNode(t, addr))
	}
	assert.Equal(t, viaGoRedis[0].Info(), viaRueidis[0].Info(), "one server, one name, whichever the client")
	opts := []redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject())}
	g, r := newRedlock(t, viaGoRedis, opts...), newRedlock(t, viaRueidis, opts...)
	interop(t, g, r)
	_, err := redlock.New([]driver.Node{viaGoRedis[0], viaRueidis[0], viaRueidis[1]})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "one server through two adapters is one node")

	t.Run("hand-off", func(t *testing.T) {
		obsG, refusedG := contention()
		obsR, refusedR := contention()
		g := newRedlock(t, viaGoRedis, redlock.WithTTL(time.Minute), obsG)
		r := newRedlock(t, viaRueidis, redlock.WithTTL(time.Minute), obsR)
		t.Run("go-redis wakes rueidis", func(t *testing.T) { handedOff(t, g, r, refusedR, fresh("interop:handoff"), nil) })
		t.Run("rueidis wakes go-redis", func(t *testing.T) { handedOff(t, r, g, refusedG, fresh("interop:handoff"), nil) })
	})
}

// interop checks that lockers g and r (fenced, refusing at once) over
// two adapters' nodes of the same servers exclude each other and share
// fence counters, for single keys and sets.
func interop(t *testing.T, g, r *redlock.Redlock) {
	for _, tc := range []struct {
		name        string
		first, then *redlock.Redlock
	}{{"go-redis then rueidis", g, r}, {"rueidis then go-redis", r, g}} {
		t.Run(tc.name, func(t *testing.T) {
			key := fresh("interop")
			l, err := tc.first.Lock(t.Context(), key)
			require.NoError(t, err)
			_, err = tc.then.Lock(t.Context(), key)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "the lock is held for the other adapter")
			require.NoError(t, l.Unlock(t.Context()))
			next, err := tc.then.Lock(t.Context(), key)
			require.NoError(t, err, "released through one adapter, free for the other")
			assert.Equal(t, l.Fence()+1, next.Fence(), "one fence counter per key, whichever the adapter")
			require.NoError(t, next.Unlock(t.Context()))

			tag := fresh("set")
			a, b, c := "{"+tag+"}:a", "{"+tag+"}:b", "{"+tag+"}:c"
			set, err := tc.first.LockMany(t.Context(), []string{b, a})
			require.NoError(t, err)
			_, err = tc.then.Lock(t.Context(), a)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a key of a set held through the other adapter")
			_, err = tc.then.LockMany(t.Context(), []string{b, c})
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "an overlapping set")
			require.NoError(t, set.Unlock(t.Context()))
			next, err = tc.then.LockMany(t.Context(), []string{a, b})
			require.NoError(t, err)
			for i := range next.Keys() {
				assert.Equal(t, set.Fences()[i]+1, next.Fences()[i], "one counter per key, whichever the adapter")
			}
			require.NoError(t, next.Unlock(t.Context()))
		})
	}
}
