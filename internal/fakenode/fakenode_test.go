package fakenode_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
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
	ok, err := n.Acquire(t.Context(), "k", "a", time.Second)
	require.NoError(t, err)
	assert.True(t, ok)
	v, _ := m.Get("k")
	assert.Equal(t, "a", v, "the call reached the node")
	ok, _, err = n.AcquireFenced(t.Context(), "f", "a", time.Second)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = n.Release(t.Context(), "k", "a", false)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 1, n.Calls(fakenode.Acquire))
	assert.Equal(t, 1, n.Calls(fakenode.AcquireFenced))
	assert.Equal(t, 1, n.Calls(fakenode.Release))
	assert.Zero(t, n.Calls(fakenode.Extend))
}

func TestHookDecides(t *testing.T) {
	m, n := wrapped(t)
	var held []fakenode.Call
	n.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		held = append(held, c)
		return fakenode.Result{Err: fakenode.ErrInjected}
	})
	_, err := n.Acquire(t.Context(), "k", "a", time.Second)
	assert.ErrorIs(t, err, fakenode.ErrInjected)
	assert.False(t, m.Exists("k"), "the hook did not send it")
	require.Len(t, held, 1)
	assert.Equal(t, fakenode.Acquire, held[0].Op)
	assert.Equal(t, "k", held[0].Key)
	assert.Equal(t, "a", held[0].Token)
	r := held[0].Send(context.Background()) // delivered late
	require.NoError(t, r.Err)
	assert.True(t, r.OK)
	assert.True(t, m.Exists("k"))
	n.SetHook(nil)
	ok, err := n.Extend(t.Context(), "k", "a", time.Second)
	require.NoError(t, err)
	assert.True(t, ok, "without a hook calls go straight through")
}

func TestViewsHideCapabilities(t *testing.T) {
	_, n := wrapped(t)
	var b redlock.Backend = n
	_, fencer := b.(redlock.Fencer)
	_, notifier := b.(redlock.Notifier)
	assert.True(t, fencer && notifier, "a Node passes both on")
	_, fencer = fakenode.Plain(n).(redlock.Fencer)
	_, notifier = fakenode.Plain(n).(redlock.Notifier)
	assert.False(t, fencer || notifier, "Plain hides both")
	_, fencer = fakenode.Silent(n).(redlock.Fencer)
	_, notifier = fakenode.Silent(n).(redlock.Notifier)
	assert.True(t, fencer)
	assert.False(t, notifier, "Silent hides Notifier only")
}
