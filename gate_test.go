package redlock_test

import (
	"context"
	"github.com/quorumlock/redlock/driver"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"

	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGateIsChosenByNameNotOrder(t *testing.T) {
	_, bs := minis(t, 5)
	for _, key := range []string{"a", "order:1", "rf:lock:p:e:r:write"} {
		gate := bs[redlock.GateFor(key, bs)].Info().Name
		reversed := make([]driver.Node, len(bs))
		for i, b := range bs {
			reversed[len(bs)-1-i] = b
		}
		assert.Equal(t, gate, reversed[redlock.GateFor(key, reversed)].Info().Name, "processes listing the nodes differently agree on %q's gate", key)
	}
	seen := map[int]bool{}
	for i := range 50 {
		seen[redlock.GateFor(string(rune('a'+i)), bs)] = true
	}
	assert.Greater(t, len(seen), 1, "keys spread over the nodes")
}

// TestWokenWaiterRefusedByTheGateTouchesNoOtherNode: the key is still held
// on the gate when a waiter is woken; it asks the gate alone. (The key is
// another locker's: without WithFairness(false) the waiter would join the
// queues, whose waiters need no gate.)
func TestWokenWaiterRefusedByTheGateTouchesNoOtherNode(t *testing.T) {
	ms, bs := minis(t, 3)
	nodes, cs := fakenode.WrapAll(bs)
	gate := redlock.GateFor("k", nodes)
	obs, waitFailures := waitingFor(t)
	r, err := redlock.New(nodes, redlock.WithObserver(obs), redlock.WithFairness(false))
	require.NoError(t, err)
	for _, m := range ms {
		require.NoError(t, m.Set("k", "other"))
	}
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := r.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(3, time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		done <- err
	}()
	testwait.Until(t, `redlock.InLine(r, "k") == 1`, func() bool { return redlock.InLine(r, "k") == 1 })
	// Two failed attempts: the first, and the one right after subscribing
	// (which catches a release before the subscription). Only then is the
	// waiter idle, waiting for a notification.
	waitFailures(2)
	before := make([]int, len(cs))
	for i, c := range cs {
		before[i] = c.Calls(fakenode.Acquire)
	}

	// Released everywhere but on the gate, announced everywhere.
	for i, m := range ms {
		if i != gate {
			m.Del("k")
		}
	}
	for _, m := range ms {
		m.Publish(redlock.ReleaseChannel("k"), "")
	}
	testwait.Until(t, `cs[gate].Calls(fakenode.Acquire) > before[gate]`, func() bool { return cs[gate].Calls(fakenode.Acquire) > before[gate] })
	for i, c := range cs {
		if i != gate {
			assert.Equal(t, before[i], c.Calls(fakenode.Acquire), "node %d was not asked", i)
		}
	}

	ms[gate].Del("k")
	for _, m := range ms {
		m.Publish(redlock.ReleaseChannel("k"), "")
	}
	require.NoError(t, <-done, "once the gate is free the woken waiter takes every node")
}

// TestGateDownFallsBackToAllNodes: with the gate node dead, a woken waiter
// still gets the lock from the others.
func TestGateDownFallsBackToAllNodes(t *testing.T) {
	ms, bs := minis(t, 3)
	gate := redlock.GateFor("k", bs)
	r, err := redlock.New(bs, redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	ms[gate].Close()
	holder, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := r.Lock(ctx, "k", redlock.WithStrategy(redlock.Retry(3, time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		done <- err
	}()
	testwait.Until(t, `redlock.InLine(r, "k") == 1`, func() bool { return redlock.InLine(r, "k") == 1 })
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-done)
}

// TestRealServersHerdOfProcessesKeepsExclusion: workers standing for
// separate processes (own connections, own lines) are all woken by each
// release and race through the gate; mutual exclusion holds and every
// worker gets its turns.
func TestRealServersHerdOfProcessesKeepsExclusion(t *testing.T) {
	c, _ := realNodes(t, 5)
	const procs, rounds = 6, 15
	var inside, overlaps, done atomic.Int64
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	errs := make(chan error, procs*rounds)
	var wg sync.WaitGroup
	for range procs {
		nodes := make([]driver.Node, len(c.Addrs()))
		for i, addr := range c.Addrs() {
			nodes[i] = node(t, redistest.Client(t, addr)) // own clients, own locker: as another process
		}
		r, err := redlock.New(nodes, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(10, 50*time.Millisecond)))
		require.NoError(t, err)
		wg.Go(func() {
			for range rounds {
				l, err := r.Lock(ctx, "herd")
				if err != nil {
					errs <- err
					continue
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				done.Add(1)
				if err := l.Unlock(ctx); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, redlock.ErrTimeout, "the only acceptable failure is a wait that timed out")
	}
	assert.Zero(t, overlaps.Load())
	assert.Greater(t, done.Load(), int64(procs*rounds*9/10))
}
