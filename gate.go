package redlock

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// The hand-off gate. When a release wakes waiters of several processes at
// once (one per locker, see line.go), each would send its SETs to every
// node at the same moment, and with N > 1 the nodes' votes split: each
// grants whoever came first, often nobody reaches a quorum, everyone rolls
// back, and the rollbacks wake everyone again. So a woken waiter first
// asks one node, the gate, and asks the others only if the gate granted:
// the losers are refused by the gate and touch no other node (no split
// vote, no rollback, no notification), and the winner collects the rest.
// It costs the woken waiter one round trip more.
//
// The gate is chosen per key by rendezvous hashing over the nodes' names,
// so every process that names the nodes alike picks the same gate for a
// key, and the keys spread over the nodes. A gate that fails (down,
// paused) is skipped for the rest of the Lock call; waiters then spread
// their attempts at random instead (see spread). First attempts and
// retries after a backoff delay never use the gate: the gate only orders
// woken waiters among themselves.

// gateFor returns the index of key's gate node.
func gateFor(key string, nodes []*node) int {
	best, score := 0, uint64(0)
	for i, n := range nodes {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte(n.name()))
		if s := h.Sum64(); i == 0 || s > score {
			best, score = i, s
		}
	}
	return best
}

// gatedRound is the acquire round of a woken waiter: the gate node alone,
// then, unless it refused, the other nodes. held is true when the gate
// refused (the key is held there), and then no other node was asked;
// gateFailed is true when the gate did not answer.
func (s scope) gatedRound(ctx context.Context, gate int, call nodeCall) (r round, held, gateFailed bool) {
	nodes := s.nodes
	g := s.on(nodes[gate:gate+1]).fanOut(ctx, "acquire", ErrNotAcquired,
		func(ctx context.Context, _ int, n *node) (bool, error) { return call(ctx, gate, n) })
	if g.errs[0] == ErrNotAcquired {
		return round{}, true, false
	}
	rest := make([]*node, 0, len(nodes)-1)
	index := make([]int, 0, len(nodes)-1)
	for i, b := range nodes {
		if i != gate {
			rest = append(rest, b)
			index = append(index, i)
		}
	}
	o := s.on(rest).fanOut(ctx, "acquire", ErrNotAcquired,
		func(ctx context.Context, j int, n *node) (bool, error) { return call(ctx, index[j], n) })
	r = round{nodes: nodes, errs: make([]error, len(nodes)), granted: g.granted + o.granted}
	r.errs[gate] = g.errs[0]
	for j, i := range index {
		r.errs[i] = o.errs[j]
	}
	return r, false, g.errs[0] != nil
}

// errGateHeld is the contention error of a woken waiter refused by the
// gate.
func errGateHeld(key string, gate *node) error {
	return fmt.Errorf("%w: %q is held on %s, the node woken waiters ask first", ErrNotAcquired, key, gate.name())
}

// handoffSpread bounds the random pause a woken Redlock waiter takes
// before its attempt when the hand-off gate failed. Waiters of
// several processes (one per locker, see line) wake on the same release;
// attempting all at once splits the nodes' votes so that often nobody
// reaches a quorum and everyone rolls back. Spreading the attempts over
// about a round trip lets one waiter take every node first; with a herd of
// seven and no gate, BenchmarkHandoff measured about a quarter off the
// hand-off time with five nodes. A single node has no votes to split.
const handoffSpread = time.Millisecond

// spread pauses a woken waiter for a random part of handoffSpread when
// there are several nodes. It reports false if ctx ended first.
func spread(ctx context.Context, nodes int) bool {
	if nodes == 1 {
		return true
	}
	t := time.NewTimer(rand.N(handoffSpread))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
