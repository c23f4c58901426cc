package rueidisnode

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clusterSetsAndPeek: on a cluster node a set's keys and a peeked key are
// mapped as a single lock key is, so a set and a single-key lock of one
// name exclude each other, through this adapter and against goredis, a
// set spread over two slots is refused before any round, and Peek reads
// the holder's token and fence. (Without the mapping, LockMany wrote the
// bare name and a Lock of the same name was granted beside it.)
func clusterSetsAndPeek(t *testing.T, seeds []string) {
	ctx := t.Context()
	rue, err := redlock.NewSingle(clusterNodeOf(t, seeds), redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	gor, err := redlock.NewSingle(goredisClusterNode(t, seeds...), redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)

	key := fresh("set")
	set, err := rue.LockMany(ctx, []string{key})
	require.NoError(t, err)
	_, err = rue.Lock(ctx, key)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "a set excludes a single-key lock of its key (rueidis)")
	_, err = gor.Lock(ctx, key)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "and through goredis")
	_, err = gor.LockMany(ctx, []string{key})
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "and a goredis set")
	require.NoError(t, set.Unlock(ctx))

	one, err := gor.Lock(ctx, key, redlock.WithFencing())
	require.NoError(t, err)
	_, err = rue.LockMany(ctx, []string{key})
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "a goredis lock excludes a rueidis set of its key")
	tok, fence, err := clusterNodeOf(t, seeds).Peek(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, one.Token(), tok, "Peek reads the mapped key")
	assert.Equal(t, one.Fence(), fence)
	require.NoError(t, one.Unlock(ctx))

	_, err = rue.LockMany(ctx, []string{fresh("a"), fresh("b")})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a set over two slots is refused")
	tagged := "{" + fresh("acct") + "}"
	both, err := rue.LockMany(ctx, []string{tagged + ":1", tagged + ":2"})
	require.NoError(t, err, "a set sharing one hash tag")
	require.NoError(t, both.Unlock(ctx))
}
