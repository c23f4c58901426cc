package goredis

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterLockMany: a set with one hash tag is locked, fenced and
// released on the cluster, on the keys a single-key lock uses; a set
// across slots is refused before any round.
func TestClusterLockMany(t *testing.T) {
	g, cc := clusterNode(t)
	ctx := t.Context()
	tag := fresh("set")
	keys := []string{"a:{" + tag + "}", "b:{" + tag + "}"}
	s := newSingle(t, g, redlock.WithStrategy(redlock.Reject()), redlock.WithFencing(), redlock.WithTTL(time.Minute))
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
	assert.False(t, errors.As(err, &qe), "refused before any round")
}

func mustInt(t *testing.T, f func() (int64, error)) int64 {
	t.Helper()
	n, err := f()
	require.NoError(t, err)
	return n
}
