package redlock

import (
	"context"
	"fmt"
)

// fence runs round 2 of the scheme (docs/fencing.md) after round 1 (r, with the
// counters the nodes returned) reached a quorum. It returns the tokens,
// one per key (s.width() of them; counters holds as many per node), or an
// error when too few nodes have every counter at least that high:
// matching ErrUnavailable when the raise round's nodes did not answer,
// ErrNotAcquired when they no longer held our key.
//
// For a set of keys the argument of docs/fencing.md holds key by key:
// every node that granted holds every key of the set, so for each key a
// quorum of nodes hold our token with that key's counter at least its
// fence before the set is granted.
func (s scope) fence(ctx context.Context, token string, r round, counters []int64) ([]int64, error) {
	k := s.width()
	f := make([]int64, k)
	for i, err := range r.errs {
		if err == nil {
			for j, c := range counters[i*k : (i+1)*k] {
				f[j] = max(f[j], c)
			}
		}
	}
	at := 0 // nodes of Q whose counters are all at least f
	var behind []int
	for i, err := range r.errs {
		switch {
		case err != nil:
		case atLeast(counters[i*k:(i+1)*k], f):
			at++
		default:
			behind = append(behind, i)
		}
	}
	q := quorum(len(s.nodes))
	if at >= q || len(behind) == 0 {
		return f, nil
	}
	sub := make([]*node, len(behind))
	for j, i := range behind {
		sub[j] = s.nodes[i]
	}
	raised := s.on(sub).fanOut(ctx, "fence", ErrNotAcquired, func(ctx context.Context, _ int, n *node) (bool, error) {
		return s.what.raiseFence(ctx, s, n, token, f)
	})
	if at += raised.granted; at >= q {
		return f, nil
	}
	e := r.quorumError("acquire", s.key, 0)
	e.Granted = at // nodes at the token, not nodes that set the key
	for j, err := range raised.errs {
		if err != nil {
			e.Failed = append(e.Failed, NodeError{Node: sub[j].name(), Err: fmt.Errorf("raising the fence to %v: %w", fenceText(f), err)})
		}
	}
	return nil, e
}

// atLeast reports whether every counter is at least its fence.
func atLeast(counters, fences []int64) bool {
	for j, c := range counters {
		if c < fences[j] {
			return false
		}
	}
	return true
}

// fenceText shows one key's fence as a number and a set's as a list.
func fenceText(f []int64) any {
	if len(f) == 1 {
		return f[0]
	}
	return f
}
