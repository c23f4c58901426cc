package redlock_test

import (
	"context"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The counterexample to counting permits per node, as a test of the test:
// the same fault pattern and the same count of holders, run on the naive
// scheme (which must fail it) and on the semaphore (which must pass).
//
// Three clients and three nodes; each client reaches only two nodes:
// A {0,1}, B {1,2}, C {0,2}. Every pair of clients shares one node.
var partition = [][]int{{0, 1}, {1, 2}, {0, 2}}

// permitScheme is a way for client c to take and give back one permit.
type permitScheme interface {
	acquire(t *testing.T, c int) bool
	release(t *testing.T, c int)
}

// holdersUnderPartition has the clients take a permit one after another,
// in order, each keeping it, and returns how many hold one at once.
func holdersUnderPartition(t *testing.T, s permitScheme, order []int) int {
	t.Helper()
	var holding []int
	for _, c := range order {
		if s.acquire(t, c) {
			holding = append(holding, c)
		}
	}
	for _, c := range holding {
		s.release(t, c)
	}
	return len(holding)
}

// clientOrders are every order of the three clients.
var clientOrders = [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}

func TestNaivePerNodeCountersAdmitTooManyUnderPartition(t *testing.T) {
	ms, _ := minis(t, 3)
	naive := newNaiveCounters(t, ms, 2)
	for _, order := range clientOrders {
		got := holdersUnderPartition(t, naive, order)
		assert.Equal(t, 3, got, "order %v: with 2 permits the naive scheme lets all 3 clients hold at once", order)
		assert.LessOrEqual(t, naive.maxCount, int64(2), "although no node ever counted more than 2")
	}
}

func TestSemaphoreBoundHoldsUnderTheSamePartition(t *testing.T) {
	_, bs := minis(t, 3)
	slots := newPartitionedSemaphores(t, bs, 2)
	for _, order := range clientOrders {
		for range 5 { // random starting slots
			got := holdersUnderPartition(t, slots, order)
			assert.Equal(t, 2, got, "order %v: two permits, two holders, never three", order)
		}
	}
}

// TestSemaphoreBoundHoldsUnderPartitionAndContention: the three
// partitioned clients' workers compete for the two permits at once,
// waiting with Retry; holders never exceed two.
func TestSemaphoreBoundHoldsUnderPartitionAndContention(t *testing.T) {
	_, bs := minis(t, 3)
	slots := newPartitionedSemaphores(t, bs, 2, redlock.WithStrategy(redlock.Retry(60, 2*time.Millisecond)))
	locktest.PermitsAcross(t, slots.sems, 9, 15)
}

// naiveCounters is the unsafe scheme: every node admits a client while
// fewer than permits clients are counted there, and a client holds a
// permit when a majority of nodes admitted it.
type naiveCounters struct {
	nodes    []*redis.Client
	permits  int
	maxCount int64 // the most clients any node counted at once
}

// naiveAdmit: KEYS[1] the node's set of holders; ARGV[1] the client,
// ARGV[2] the permits. Replies 1 when the client is (now) counted.
const naiveAdmit = `
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('SADD', KEYS[1], ARGV[1])
  return 1
end
return 0`

func newNaiveCounters(t *testing.T, ms []*miniredis.Miniredis, permits int) *naiveCounters {
	n := &naiveCounters{permits: permits}
	for _, m := range ms {
		n.nodes = append(n.nodes, redistest.Client(t, m.Addr()))
	}
	return n
}

func (n *naiveCounters) acquire(t *testing.T, c int) bool {
	admitted := 0
	for _, i := range partition[c] { // the other node is out of reach
		ok, err := n.nodes[i].Eval(t.Context(), naiveAdmit, []string{"jobs:holders"}, c, n.permits).Int()
		require.NoError(t, err)
		admitted += ok
		count, err := n.nodes[i].SCard(t.Context(), "jobs:holders").Result()
		require.NoError(t, err)
		n.maxCount = max(n.maxCount, count)
	}
	return admitted >= redlock.Quorum(len(n.nodes))
}

func (n *naiveCounters) release(t *testing.T, c int) {
	for _, i := range partition[c] {
		require.NoError(t, n.nodes[i].SRem(t.Context(), "jobs:holders", c).Err())
	}
}

// partitionedSemaphores gives every client a semaphore on a Redlock of
// its own whose node out of reach fails every call.
type partitionedSemaphores struct {
	sems []*redlock.Semaphore
	held map[int]*redlock.Lock
}

func newPartitionedSemaphores(t *testing.T, bs []driver.Node, permits int, opts ...redlock.Option) *partitionedSemaphores {
	p := &partitionedSemaphores{held: map[int]*redlock.Lock{}}
	for c, reach := range partition {
		nodes, fakes := fakenode.WrapAll(bs)
		for i, f := range fakes {
			if !slices.Contains(reach, i) {
				f.SetHook(func(context.Context, fakenode.Call) fakenode.Result {
					return fakenode.Result{Err: fakenode.ErrInjected}
				})
			}
		}
		r, err := redlock.New(plainAll(nodes, fakes), redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err, "client %d", c)
		sem, err := redlock.NewSemaphore(r, "jobs", permits, opts...)
		require.NoError(t, err)
		p.sems = append(p.sems, sem)
	}
	return p
}

// plainAll hides the fakes' Notifier, which the partition would not
// reach: waiters sleep out their delays.
func plainAll(nodes []driver.Node, fakes []*fakenode.Node) []driver.Node {
	for i, f := range fakes {
		nodes[i] = fakenode.Silent(f)
	}
	return nodes
}

func (p *partitionedSemaphores) acquire(t *testing.T, c int) bool {
	l, err := p.sems[c].Acquire(t.Context())
	if err != nil {
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "client %d: the permits are held, nothing else", c)
		return false
	}
	p.held[c] = l
	return true
}

func (p *partitionedSemaphores) release(t *testing.T, c int) {
	require.NoError(t, p.held[c].Unlock(t.Context()), fmt.Sprintf("client %d", c))
	delete(p.held, c)
}
