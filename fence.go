package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"time"
)

// WithFencing makes every acquisition issue a fencing token,
// (*Lock).Fence, strictly greater than every earlier holder's of the same
// key. Every node must implement Fencer (the go-redis adapter does), or
// New, NewSingle and Lock return ErrInvalid. The rest of this comment is
// the scheme and the argument that it is correct.
//
// A lock cannot stop a holder that pauses (GC, swap, a stopped VM) past
// its validity and then writes: by then another client may hold the lock.
// A fencing token lets the protected resource refuse such a write. Every
// holder of a key gets a number strictly greater than every earlier
// holder's; it sends the number with each write, and the resource rejects
// a write whose number is lower than the highest it has seen.
//
// # Counters
//
// Each node keeps, next to the lock key K, a counter under the key
// K + ":fence". It never expires (one small key per lock key ever fenced,
// kept for good: expiring it would restart the sequence) and only ever
// goes up. With a cluster client, give K a hash tag ("{order:1}") so K and
// its counter share a slot. Do not use a name ending in ":fence" as a lock
// key of its own.
//
// # Single
//
// acquire_fenced.lua does SET K token NX PX ttl and, only when that set
// the key, INCR of the counter, atomically. The token is the new counter
// value: successive holders set K one after another on the one node, so
// their INCRs come in the same order.
//
// # Redlock: why the maximum is not enough, and the second round
//
// Over N nodes, each granting node i returns its counter c_i, and the
// obvious token, the maximum of the c_i over the granting quorum Q, is
// not monotonic. A failed attempt (a client that set K on only a minority,
// then rolled back) still incremented those nodes' counters; a later
// holder whose quorum includes them gets a large token, and the holder
// after it, on a quorum that avoids them, a smaller one. The counters of
// different nodes drift apart and the maximum goes backwards.
//
// The lockers therefore use two rounds:
//
//  1. every node runs acquire_fenced.lua; the lock needs a quorum Q as
//     usual, and the token is F = max over Q of c_i;
//  2. on every node of Q whose c_i < F, fence.lua raises the counter to
//     at least F, only while K still holds our token. Nodes with c_i = F
//     are already there. The lock is handed out only if a quorum R of
//     nodes (those with c_i = F plus those that confirmed the raise)
//     has its counter at least F, within the validity; otherwise the
//     acquisition is rolled back like any failed one.
//
// Claim: if holder B is granted K after holder A's lock has ended
// (released, or its validity over), then F_B > F_A. Proof: R_A and Q_B
// are both majorities of the same N nodes, so they share a node n. On n,
// A's counter reached F_A (by A's INCR or A's raise) while A's key was on
// n, since both scripts require it. Let t be when B's SET NX on n
// succeeded, in the attempt that was granted. Suppose t came before A's
// key was set on n: then B's key left n before that, while B's round was
// still running (it ends with B's grant, after A's lock ended). It cannot
// have expired, because a granted round is shorter than the TTL (bounded
// drift); and it cannot have been deleted, because only a release carrying
// B's token for that attempt deletes it, and every attempt draws its own
// token: B sends that release only after the attempt's round has ended
// (its rollback or its Unlock), and a late release of an earlier attempt
// of B's carries another token. So t came after A's key left n, hence
// after A's counter on n reached F_A. Counters never decrease, so B's INCR
// on n returned at least F_A + 1, and F_B, the maximum over Q_B, is at
// least that. Successive holders therefore get strictly increasing
// tokens. ∎
//
// # What it rests on
//
// The argument needs the counters to survive on the nodes it relies on:
// the node n above must still have its counter when B increments it. A
// master restarted without persistence comes back with its counters at
// zero (and its locks gone). When every node granted A (the usual case),
// R_A is all N nodes and Q_B shares a majority with it, so a minority of
// restarted nodes does no harm; in the worst case (R_A and Q_B sharing a
// single node) one restarted node is enough for B's token to come out
// lower than A's. The delayed restart that keeps the lock itself safe (stay
// down for a TTL) does not bring counters back: for fencing, run the
// masters with AOF and appendfsync always.
//
// Fencing protects the resource against a stale holder (a process pause,
// a lock that expired early because a node's clock jumped): once the next
// holder has written, the stale holder's lower token is refused. It does
// not help a resource that does not check the token, it cannot order a
// stale write that reaches the resource before the next holder's first
// write, and it orders holders only of the same key.
func WithFencing() Option { return func(c *config) { c.fencing = true } }

// fenceSuffix names a lock key's counter: key + fenceSuffix.
const fenceSuffix = ":fence"

var (
	//go:embed acquire_fenced.lua
	acquireFencedSource string
	acquireFencedScript = newScript(acquireFencedSource)

	//go:embed fence.lua
	raiseFenceSource string
	raiseFenceScript = newScript(raiseFenceSource)
)

func (g *goRedis) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	n, err := g.run(ctx, acquireFencedScript, 2, key, key+fenceSuffix, token, ttl.Milliseconds())
	return n > 0, n, err
}

func (g *goRedis) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	n, err := g.run(ctx, raiseFenceScript, 2, key, key+fenceSuffix, token, fence)
	return n == 1, err
}

// fence runs round 2 of the scheme above after round 1 (r, with the
// counters the nodes returned) reached a quorum. It returns the token, or
// an error when too few nodes have their counter at least that high:
// matching ErrUnavailable when the raise round's nodes did not answer,
// ErrNotAcquired when they no longer held our key.
func fence(ctx context.Context, nodes []Backend, cfg *config, key, token string, r round, counters []int64) (int64, error) {
	var f int64
	for i, err := range r.errs {
		if err == nil {
			f = max(f, counters[i])
		}
	}
	at := 0 // nodes of Q whose counter is at least f
	var behind []int
	for i, err := range r.errs {
		switch {
		case err != nil:
		case counters[i] == f:
			at++
		default:
			behind = append(behind, i)
		}
	}
	q := quorum(len(nodes))
	if at >= q || len(behind) == 0 {
		return f, nil
	}
	sub := make([]Backend, len(behind))
	for j, i := range behind {
		sub[j] = nodes[i]
	}
	raised := fanOut(ctx, sub, cfg, "fence", key, ErrNotAcquired, func(ctx context.Context, _ int, b Backend) (bool, error) {
		return b.(Fencer).RaiseFence(ctx, key, token, f)
	})
	if at += raised.granted; at >= q {
		return f, nil
	}
	e := r.quorumError("acquire", key, 0)
	e.Granted = at // nodes at the token, not nodes that set the key
	for j, err := range raised.errs {
		if err != nil {
			e.Failed = append(e.Failed, NodeError{Node: sub[j].Name(), Err: fmt.Errorf("raising the fence to %d: %w", f, err)})
		}
	}
	return 0, e
}
