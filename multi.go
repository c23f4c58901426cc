package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Several keys at once (LockMany, DoMany): a set of keys taken all or
// nothing, with everything a single-key lock has (quorum and validity,
// rollback, Extend and renewal, fencing, hand-off, the observer).
//
// On each node one script sets every key of the set or none
// (acquire_many.lua), so a node grants only if it set them all, and a quorum of
// such nodes grants the set: two sets that share a key, or a set and a
// single-key lock on one of its keys, would need two majorities that each
// set that key, and the node they share refuses the later one (the key
// exists there), exactly as for one key.
//
// The keys go to every node in one canonical (sorted) order, and a node
// takes them in one atomic step, so two callers asking for the same keys
// in opposite orders never hold part each and wait for the other: there is
// no partial hold to deadlock on. A refused caller holds nothing and
// retries under its strategy, like a refused single-key caller.

// maxKeys is the most distinct keys one LockMany or DoMany call may lock.
// A set is one script call per node with its keys as arguments; the bound
// keeps that call (and the time the node spends in it, during which it
// serves nobody else) small.
const maxKeys = 64

// LockMany acquires every key of keys, all or nothing (see
// Locker.LockMany): on each node one atomic step sets them all or none,
// and the set is granted when a quorum of nodes set them all within the
// validity. No keys, more than 64 distinct keys, an empty key, or a set
// that a node cannot hold together (a Redis Cluster needs one hash slot)
// is an error matching ErrInvalid. Otherwise it is Lock for the set: the
// same strategy, errors and options; Extend, Unlock, WithAutoRenew and
// WithFencing (Lock.Fences, one per key) cover the whole set.
func (r *Redlock) LockMany(ctx context.Context, keys []string, opts ...Option) (*Lock, error) {
	sc, err := r.prepareMany(ctx, keys, opts)
	if err != nil {
		return nil, err
	}
	return lockScope(ctx, sc)
}

// DoMany is Do on the set of keys LockMany takes: fn runs while every
// key is held, renewed together, and its context is cancelled if the set
// is lost.
func (r *Redlock) DoMany(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil function")
	}
	sc, err := r.prepareMany(ctx, keys, opts)
	if err != nil {
		return err
	}
	return doScope(ctx, sc, fn)
}

// prepareMany is prepare for a set of keys.
func (r *Redlock) prepareMany(ctx context.Context, keys []string, opts []Option) (scope, error) {
	if ctx == nil {
		return scope{}, invalidf("nil context")
	}
	set, err := canonicalKeys(keys)
	if err != nil {
		return scope{}, err
	}
	if err := checkKeySet(r.nodes, set); err != nil {
		return scope{}, err
	}
	cfg := r.cfg.with(opts)
	if err := cfg.validate(); err != nil {
		return scope{}, err
	}
	return scope{key: setName(set), keys: set, what: keySet{}, nodes: r.nodes, cfg: &cfg}, nil
}

// canonicalKeys returns keys sorted, without duplicates, in a slice of its
// own, or an error matching ErrInvalid.
func canonicalKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, invalidf("no keys")
	}
	set := slices.Compact(slices.Sorted(slices.Values(keys)))
	if set[0] == "" { // sorted: an empty key comes first
		return nil, invalidf("empty key")
	}
	if len(set) > maxKeys {
		return nil, invalidf("%d distinct keys, more than %d", len(set), maxKeys)
	}
	return slices.Clip(set), nil
}

// setName names a set in errors and events: "[a b c]".
func setName(keys []string) string { return "[" + strings.Join(keys, " ") + "]" }

// checkKeySet refuses, before the first attempt, a set that some node
// cannot hold together (a Redis Cluster needs one hash slot).
func checkKeySet(nodes []*node, set []string) error {
	for _, key := range set {
		if err := checkKey(nodes, key); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		if _, err := n.keysOf(set); err != nil {
			return fmt.Errorf("keys %s cannot be locked together: %w", shorten(fmt.Sprintf("%q", set)), err)
		}
	}
	return nil
}

// keySet is the set s.keys, all or nothing (acquire_many.lua and its
// kin).
type keySet struct{}

func (keySet) acquire(ctx context.Context, s scope, n *node, token string) (bool, error) {
	return n.acquireMany(ctx, s.keys, token, s.cfg.ttl)
}

func (keySet) acquireFenced(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	return n.acquireManyFenced(ctx, s.keys, token, s.cfg.ttl, s.cfg.fenceLife, fences)
}

func (keySet) raiseFence(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	return n.raiseFences(ctx, s.keys, token, fences, s.cfg.fenceLife)
}

func (keySet) release(ctx context.Context, s scope, n *node, token string, announce bool) (bool, error) {
	return n.releaseMany(ctx, s.keys, token, announce)
}

func (keySet) extend(ctx context.Context, s scope, n *node, token string, ttl time.Duration) (bool, error) {
	return n.extendMany(ctx, s.keys, token, ttl, s.cfg.fenceLife)
}

// notify subscribes to the releases of every key of the set: a release
// of any of them may let the set be taken.
func (keySet) notify(ctx context.Context, s scope, n *node, released func(string)) (func(), error) {
	return n.notify(ctx, s.keys, "", released)
}
