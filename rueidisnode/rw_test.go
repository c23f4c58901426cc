package rueidisnode

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadWriteInteropWithGoRedis: readers and writers through this
// adapter and through go-redis share one read-write lock on the same
// servers: readers of both share the key, a writer of either is refused
// while they hold, and a reader of either sees the writer's generation.
func TestReadWriteInteropWithGoRedis(t *testing.T) {
	viaGoRedis, viaRueidis := bothAdapters(t)
	g, r := interopRedlocks(t, viaGoRedis, viaRueidis)

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

// clusterReadWrite: on a Redis Cluster a key without a hash tag is locked
// in braces for readers and writers too (the readers' set and the mark in
// its slot), and go-redis's cluster node shares the read-write lock.
func clusterReadWrite(t *testing.T, seeds []string) {
	g := clusterNodeOf(t, seeds)
	cc := redistest.ClusterClient(t, seeds...)
	opts := []redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithStrategy(redlock.Retry(1, time.Hour))}
	viaRueidis, err := redlock.NewSingle(g, opts...)
	require.NoError(t, err)
	viaGoRedis, err := redlock.NewSingle(goredisClusterNode(t, seeds...), opts...)
	require.NoError(t, err)
	key := fresh("rw")
	r, err := viaRueidis.RLock(t.Context(), key)
	require.NoError(t, err)
	assert.Equal(t, "redlock:readers", cc.Get(t.Context(), "{"+key+"}").Val(), "the key in braces holds the readers' marker")
	assert.Equal(t, int64(1), cc.ZCard(t.Context(), "{"+key+"}:readers").Val(), "the readers in its slot")
	r2, err := viaGoRedis.RLock(t.Context(), key)
	require.NoError(t, err, "go-redis's reader shares it")
	got := make(chan error, 1)
	go func() {
		w, err := viaGoRedis.WLock(t.Context(), key)
		if err == nil {
			err = w.Unlock(t.Context())
		}
		got <- err
	}()
	testwait.Until(t, "the writer's mark", func() bool { return cc.Exists(t.Context(), "{"+key+"}:writer-waiting").Val() == 1 })
	require.NoError(t, r.Unlock(t.Context()))
	require.NoError(t, r2.Unlock(t.Context()))
	require.NoError(t, <-got, "the writer, woken by the last reader's SPUBLISH")
}
