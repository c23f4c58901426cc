package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGateIsChosenByNameNotOrder(t *testing.T) {
	_, bs := minis(t, 5)
	for _, key := range []string{"a", "order:1", "rf:lock:p:e:r:write"} {
		gate := bs[gateFor(key, bs)].Name()
		reversed := make([]Backend, len(bs))
		for i, b := range bs {
			reversed[len(bs)-1-i] = b
		}
		assert.Equal(t, gate, reversed[gateFor(key, reversed)].Name(), "processes listing the nodes differently agree on %q's gate", key)
	}
	seen := map[int]bool{}
	for i := range 50 {
		seen[gateFor(string(rune('a'+i)), bs)] = true
	}
	assert.Greater(t, len(seen), 1, "keys spread over the nodes")
}

// countingNode counts acquisitions reaching a go-redis node, keeping its
// Notifier.
type countingNode struct {
	*goRedis
	acquires atomic.Int64
}

func (c *countingNode) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	c.acquires.Add(1)
	return c.goRedis.Acquire(ctx, key, token, ttl)
}

// TestWokenWaiterRefusedByTheGateTouchesNoOtherNode: the key is still held
// on the gate when a waiter is woken; it asks the gate alone.
func TestWokenWaiterRefusedByTheGateTouchesNoOtherNode(t *testing.T) {
	ms, bs := minis(t, 3)
	cs := make([]*countingNode, len(bs))
	nodes := make([]Backend, len(bs))
	for i, b := range bs {
		cs[i] = &countingNode{goRedis: b.(*goRedis)}
		nodes[i] = cs[i]
	}
	gate := gateFor("k", nodes)
	r, err := New(nodes)
	require.NoError(t, err)
	for _, m := range ms {
		require.NoError(t, m.Set("k", "other"))
	}
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := r.Lock(ctx, "k", WithStrategy(Retry(1, time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		done <- err
	}()
	waitUntil(t, func() bool { return inLine("k") == 1 })
	before := make([]int64, len(cs))
	for i, c := range cs {
		before[i] = c.acquires.Load()
	}

	// Released everywhere but on the gate, announced everywhere.
	for i, m := range ms {
		if i != gate {
			m.Del("k")
		}
	}
	for _, m := range ms {
		m.Publish(ReleaseChannel("k"), "")
	}
	waitUntil(t, func() bool { return cs[gate].acquires.Load() > before[gate] })
	for i, c := range cs {
		if i != gate {
			assert.Equal(t, before[i], c.acquires.Load(), "node %d was not asked", i)
		}
	}

	ms[gate].Del("k")
	for _, m := range ms {
		m.Publish(ReleaseChannel("k"), "")
	}
	require.NoError(t, <-done, "once the gate is free the woken waiter takes every node")
}

// TestGateDownFallsBackToAllNodes: with the gate node dead, a woken waiter
// still gets the lock from the others.
func TestGateDownFallsBackToAllNodes(t *testing.T) {
	ms, bs := minis(t, 3)
	gate := gateFor("k", bs)
	r, err := New(bs, WithTTL(time.Minute), WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	ms[gate].Close()
	holder, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := r.Lock(ctx, "k", WithStrategy(Retry(1, time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		done <- err
	}()
	waitUntil(t, func() bool { return inLine("k") == 1 })
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-done)
}
