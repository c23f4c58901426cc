package redlock

import (
	"context"
	"time"
)

// The seam between the algorithm and what a lock holds. Every round of a
// call (acquire, fenced acquire, fence raise, release, extend, watch)
// does one operation on each node, and what that operation is depends on
// the thing locked: one key (Lock: oneKey), a set of keys taken all or
// nothing (LockMany: keySet, in multi.go), and a reader's or a writer's
// share of a key (rw.go). Quorum, validity, rollback, fencing rounds,
// renewal, hand-off and the observer are the same for all of them, so
// they stay in quorum.go, attempt.go, fence.go, lock.go and notify.go and
// reach the node only through a target.
//
// A target carries no data: the scope it travels in holds the key (and a
// set's keys), so the single-key hot path boxes nothing (a zero-size value
// in an interface costs no allocation).
type target interface {
	// acquire takes the thing on n with token and the scope's TTL.
	acquire(ctx context.Context, s scope, n *node, token string) (bool, error)
	// acquireFenced is acquire that also writes the fence counters it
	// issued into fences, one per key (s.width()).
	acquireFenced(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error)
	// raiseFence raises each key's counter to at least its fence while
	// token holds the thing.
	raiseFence(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error)
	// release lets go of the thing on n if token holds it (announcing the
	// release when asked), and reports whether token held all of it.
	release(ctx context.Context, s scope, n *node, token string, announce bool) (bool, error)
	// extend resets the thing's TTL on n if token holds all of it.
	extend(ctx context.Context, s scope, n *node, token string, ttl time.Duration) (bool, error)
	// notify subscribes on n to the releases of whatever would let an
	// acquire of the thing succeed; see driver.Subscriber for released
	// and the returned stop.
	notify(ctx context.Context, s scope, n *node, released func(payload string)) (func(), error)
}

// scope is what every round of one call shares: the key, the thing locked
// (its target), the nodes the round asks, and the call's configuration.
type scope struct {
	key   string   // the key, or a set's name (setName) for events and errors
	keys  []string // a set's keys, canonical; nil for one key
	what  target
	nodes []*node
	cfg   *config
}

// width is the number of keys, and so of fences, the lock holds.
func (s scope) width() int { return max(1, len(s.keys)) }

// on returns s asking nodes instead, a subset of its own.
func (s scope) on(nodes []*node) scope {
	s.nodes = nodes
	return s
}

// oneKey is the mutex on s.key.
type oneKey struct{}

func (oneKey) acquire(ctx context.Context, s scope, n *node, token string) (bool, error) {
	return n.acquire(ctx, s.key, token, s.cfg.ttl)
}

func (oneKey) acquireFenced(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	ok, f, err := n.acquireFenced(ctx, s.key, token, s.cfg.ttl, s.cfg.fenceLife)
	fences[0] = f
	return ok, err
}

func (oneKey) raiseFence(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	return n.raiseFence(ctx, s.key, token, fences[0], s.cfg.fenceLife)
}

func (oneKey) release(ctx context.Context, s scope, n *node, token string, announce bool) (bool, error) {
	return n.release(ctx, s.key, token, announce)
}

func (oneKey) extend(ctx context.Context, s scope, n *node, token string, ttl time.Duration) (bool, error) {
	if !s.cfg.fencing {
		return n.extend(ctx, s.key, token, ttl, 0) // no counter of its own to keep
	}
	return n.extend(ctx, s.key, token, ttl, s.cfg.fenceLife)
}

func (oneKey) notify(ctx context.Context, s scope, n *node, released func(string)) (func(), error) {
	return n.notify(ctx, []string{s.key}, "", released)
}
