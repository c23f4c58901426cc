package rueidisnode

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInteropSetsWithGoRedis: a set locked through one adapter excludes
// single keys and sets through the other, and both adapters share each
// key's fence counter.
func TestInteropSetsWithGoRedis(t *testing.T) {
	viaGoRedis, viaRueidis := bothAdapters(t)
	g, r := interopRedlocks(t, viaGoRedis, viaRueidis)

	set, err := r.LockMany(t.Context(), []string{"interop:set:b", "interop:set:a"})
	require.NoError(t, err)
	_, err = g.Lock(t.Context(), "interop:set:a")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a key of a set held through rueidis")
	_, err = g.LockMany(t.Context(), []string{"interop:set:b", "interop:set:c"})
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "an overlapping set")
	require.NoError(t, set.Extend(t.Context(), time.Minute))
	require.NoError(t, set.Unlock(t.Context()))

	next, err := g.LockMany(t.Context(), []string{"interop:set:a", "interop:set:b"})
	require.NoError(t, err)
	for i := range next.Keys() {
		assert.Equal(t, set.Fences()[i]+1, next.Fences()[i], "one counter per key, whichever the adapter")
	}
	require.NoError(t, next.Unlock(t.Context()))
}
