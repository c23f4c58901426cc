package fakenode_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func wrapped(t *testing.T) (*miniredis.Miniredis, *fakenode.Node) {
	m := miniredis.RunT(t)
	b, err := goredis.New(redistest.Client(t, m.Addr()))
	require.NoError(t, err)
	return m, fakenode.Wrap(b)
}

func TestPassesThroughAndCounts(t *testing.T) {
	m, n := wrapped(t)
	l, err := redlock.NewSingle(n, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	lock, err := l.Lock(t.Context(), "k")
	require.NoError(t, err)
	v, _ := m.Get("k")
	assert.Equal(t, lock.Token(), v, "the call reached the node")
	require.NoError(t, lock.Unlock(t.Context()))
	assert.Equal(t, 1, n.Calls(fakenode.Acquire))
	assert.Equal(t, 1, n.Calls(fakenode.Release))
	assert.Equal(t, 1, n.Answered(fakenode.Release))
	assert.Zero(t, n.Calls(fakenode.Extend))
}

func TestHookDecides(t *testing.T) {
	m, n := wrapped(t)
	var held []fakenode.Call
	n.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		held = append(held, c)
		return fakenode.Result{Err: fakenode.ErrInjected}
	})
	l, err := redlock.NewSingle(n, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	_, err = l.Lock(t.Context(), "k")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Failed, 1)
	assert.ErrorIs(t, qe.Failed[0].Err, fakenode.ErrInjected)
	assert.False(t, m.Exists("k"), "the hook did not send it")
	require.NotEmpty(t, held)
	assert.Equal(t, fakenode.Acquire, held[0].Op)
	assert.Equal(t, "k", held[0].Key)
	r := held[0].Send(context.Background()) // delivered late
	require.NoError(t, r.Err)
	assert.Equal(t, int64(1), r.Reply)
	assert.True(t, m.Exists("k"))
}

func TestSilentHidesSubscriber(t *testing.T) {
	_, n := wrapped(t)
	var d driver.Node = n
	_, ok := d.(driver.Subscriber)
	assert.True(t, ok, "a Node passes subscriptions on")
	_, ok = fakenode.Silent(n).(driver.Subscriber)
	assert.False(t, ok, "Silent hides them")
	assert.Equal(t, n.Info(), fakenode.Silent(n).Info())
}
