package goredis

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterKeySets: a set is held on a cluster node only when its keys
// share a hash slot, which a common hash tag gives them.
func TestClusterKeySets(t *testing.T) {
	ks, err := clusterKeys([]string{"acct:{7}:from", "acct:{7}:to"})
	require.NoError(t, err)
	assert.Equal(t, []string{"acct:{7}:from", "acct:{7}:to"}, ks, "tagged keys are used as they are")
	for _, set := range [][]string{{"a", "b"}, {"{x}a", "{y}b"}, {"{x}a", "y"}, {"{x}a", "order:{}"}} {
		_, err := clusterKeys(set)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "%q", set)
	}
	ks, err = clusterKeys([]string{"x"})
	require.NoError(t, err)
	assert.Equal(t, []string{"{x}"}, ks, "one key is wrapped as for a single lock")
}

// TestClusterLockMany: a set with one hash tag is locked, fenced and
// released on the cluster, on the keys a single-key lock uses; a set
// across slots is refused before any round.
func TestClusterLockMany(t *testing.T) {
	g, cc := clusterBackend(t)
	ctx := t.Context()
	tag := fresh("set")
	keys := []string{"a:{" + tag + "}", "b:{" + tag + "}"}
	s, err := redlock.NewSingle(g, redlock.WithStrategy(redlock.Reject()), redlock.WithFencing(), redlock.WithTTL(time.Minute))
	require.NoError(t, err)
	l, err := s.LockMany(ctx, keys)
	require.NoError(t, err)
	for i, k := range keys {
		assert.Equal(t, l.Token(), cc.Get(ctx, k).Val())
		assert.Equal(t, l.Fences()[i], mustInt(t, cc.Get(ctx, k+fenceSuffix).Int64))
	}
	_, err = s.Lock(ctx, keys[1])
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "a single lock on a key of the held set")
	require.NoError(t, l.Extend(ctx, time.Minute))
	require.NoError(t, l.Unlock(ctx))
	assert.Zero(t, cc.Exists(ctx, keys...).Val())

	_, err = s.LockMany(ctx, []string{fresh("x"), fresh("y")})
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	var qe *redlock.QuorumError
	assert.False(t, errors.As(err, &qe), "refused before any round (KeySetChecker)")
}

func mustInt(t *testing.T, f func() (int64, error)) int64 {
	t.Helper()
	n, err := f()
	require.NoError(t, err)
	return n
}
