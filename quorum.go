package redlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The quorum rule. A lock over N independent nodes is held when a majority,
// N/2+1, granted it within its validity; two holders would need two
// disjoint majorities, which cannot exist. With N = 5 the lock survives two
// lost nodes; N = 4 also needs 3 and so survives only one, which is why odd
// N is preferred: the extra even node adds cost and no tolerance.
func quorum(n int) int { return n/2 + 1 }

// scope is what every round of one call shares: the key, the thing locked
// (target.go), the nodes the round asks, and the call's configuration.
type scope struct {
	key   string   // the key, or a set's name (setName) for events and errors
	keys  []string // a set's keys, canonical; nil for one key
	what  target
	nodes []Backend
	cfg   *config
}

// width is the number of keys, and so of fences, the lock holds.
func (s scope) width() int { return max(1, len(s.keys)) }

// on returns s asking nodes instead, a subset of its own.
func (s scope) on(nodes []Backend) scope {
	s.nodes = nodes
	return s
}

// nodeCall is one operation on node i.
type nodeCall func(ctx context.Context, i int, b Backend) (bool, error)

// round is the outcome of one operation sent to every node: per node, nil
// when it agreed, the refusal sentinel when it answered no, or the error.
type round struct {
	nodes   []Backend
	errs    []error
	granted int
}

// fanOut runs call on every node concurrently, each bounded by the per-node
// timeout, and returns when all have answered or timed out. No goroutine
// outlives it. refused is the error recorded for a node that answered no;
// any other error is reported to the observer as an EventNodeError of op.
func (s scope) fanOut(ctx context.Context, op string, refused error, call nodeCall) round {
	nodes, cfg, key := s.nodes, s.cfg, s.key
	r := round{nodes: nodes, errs: make([]error, len(nodes))}
	// One deadline for the round bounds every node call, as they all start
	// together; a context per node would cost five allocations each.
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout())
	defer cancel()
	one := func(i int) {
		var start time.Time
		if cfg.observer != nil {
			start = cfg.clock.Now()
		}
		ok, err := call(ctx, i, nodes[i])
		if err == nil && !ok {
			err = refused
		}
		if err != nil && err != refused && !callerGaveUp(ctx, err) {
			cfg.observe(Event{Kind: EventNodeError, Key: key, Node: nodes[i].Name(), Op: op,
				Duration: cfg.clock.Now().Sub(start), Err: err})
		}
		r.errs[i] = err
	}
	var wg sync.WaitGroup
	for i := 1; i < len(nodes); i++ {
		wg.Go(func() { one(i) })
	}
	one(0) // the calling goroutine does one node's work itself
	wg.Wait()
	for _, err := range r.errs {
		if err == nil {
			r.granted++
		}
	}
	return r
}

// quorumError describes a round that did not grant op.
func (r round) quorumError(op, key string, left time.Duration) *QuorumError {
	e := &QuorumError{Op: op, Key: key, Nodes: len(r.nodes), Quorum: quorum(len(r.nodes)),
		Granted: r.granted, Validity: left}
	failed := 0
	for _, err := range r.errs {
		if err != nil {
			failed++
		}
	}
	if failed > 0 {
		e.Failed = make([]NodeError, 0, failed) // at its final size: one allocation, not log2(N)
	}
	for i, err := range r.errs {
		if err != nil {
			e.Failed = append(e.Failed, NodeError{Node: r.nodes[i].Name(), Err: err})
		}
	}
	return e
}

// releaseAll runs release.lua on every node, with a context that survives
// the caller's cancellation (a cancelled request must still let go of its
// lock) but is bounded by the per-node timeout.
func (s scope) releaseAll(ctx context.Context, token string) round {
	announce := !s.cfg.noHandoff
	return s.fanOut(detached(ctx), "release", ErrNotHeld,
		func(ctx context.Context, _ int, b Backend) (bool, error) {
			return s.what.release(ctx, s, b, token, announce)
		})
}

// callerGaveUp reports whether a node call failed only because the caller
// cancelled the round (Unlock stopping an extension in flight, a request
// that went away): that says nothing about the node, so it is no
// EventNodeError. A per-node timeout still is.
func callerGaveUp(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.Canceled) && errors.Is(err, context.Canceled)
}
