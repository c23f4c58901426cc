package rueidisnode

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadWriteInteropWithGoRedis: readers and writers through this
// adapter and through go-redis share one read-write lock on the same
// servers: readers of both share the key, a writer of either is refused
// while they hold, and a reader of either sees the writer's generation.
func TestReadWriteInteropWithGoRedis(t *testing.T) {
	addrs := redistest.Start(t, 3).Addrs()
	var viaGoRedis, viaRueidis []redlock.Backend
	for _, addr := range addrs {
		g, err := goredis.New(redistest.Client(t, addr))
		require.NoError(t, err)
		viaGoRedis = append(viaGoRedis, g)
		viaRueidis = append(viaRueidis, adapt(t, client(t, addr)))
	}
	opts := []redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject())}
	g := newRedlock(t, viaGoRedis, opts...)
	r := newRedlock(t, viaRueidis, opts...)

	rg, err := g.RLock(t.Context(), "interop:rw")
	require.NoError(t, err)
	rr, err := r.RLock(t.Context(), "interop:rw")
	require.NoError(t, err, "readers of both adapters share the key")
	for _, lk := range []*redlock.Redlock{g, r} {
		_, err = lk.WLock(t.Context(), "interop:rw")
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "a writer while readers of both hold")
	}
	require.NoError(t, rg.Unlock(t.Context()))
	require.NoError(t, rr.Extend(t.Context(), time.Minute))
	require.NoError(t, rr.Unlock(t.Context()))

	w, err := r.WLock(t.Context(), "interop:rw")
	require.NoError(t, err)
	_, err = g.RLock(t.Context(), "interop:rw")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader while the other adapter's writer holds")
	require.NoError(t, w.Unlock(t.Context()))
	rg, err = g.RLock(t.Context(), "interop:rw")
	require.NoError(t, err)
	assert.Equal(t, w.Fence(), rg.Fence(), "one fence counter, whichever the adapter")
	require.NoError(t, rg.Unlock(t.Context()))
}
