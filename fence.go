package redlock

import (
	"context"
	"fmt"
)

// fence runs round 2 of the scheme (docs/fencing.md) after round 1 (r, with the
// counters the nodes returned) reached a quorum. It returns the token, or
// an error when too few nodes have their counter at least that high:
// matching ErrUnavailable when the raise round's nodes did not answer,
// ErrNotAcquired when they no longer held our key.
func (s scope) fence(ctx context.Context, token string, r round, counters []int64) (int64, error) {
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
	q := quorum(len(s.nodes))
	if at >= q || len(behind) == 0 {
		return f, nil
	}
	sub := make([]Backend, len(behind))
	for j, i := range behind {
		sub[j] = s.nodes[i]
	}
	raised := s.on(sub).fanOut(ctx, "fence", ErrNotAcquired, func(ctx context.Context, _ int, b Backend) (bool, error) {
		return b.(Fencer).RaiseFence(ctx, s.key, token, f)
	})
	if at += raised.granted; at >= q {
		return f, nil
	}
	e := r.quorumError("acquire", s.key, 0)
	e.Granted = at // nodes at the token, not nodes that set the key
	for j, err := range raised.errs {
		if err != nil {
			e.Failed = append(e.Failed, NodeError{Node: sub[j].Name(), Err: fmt.Errorf("raising the fence to %d: %w", f, err)})
		}
	}
	return 0, e
}
