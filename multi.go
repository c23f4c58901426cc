package redlock

import (
	"context"
	"errors"
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
// (MultiLocker), so a node grants only if it set them all, and a quorum of
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

// MaxKeys is the most distinct keys one LockMany or DoMany call may lock.
// A set is one script call per node with its keys as arguments; the bound
// keeps that call (and the time the node spends in it, during which it
// serves nobody else) small.
const MaxKeys = 64

// KeySetLocker is a Locker that also locks several keys at once. *Single
// and *Redlock implement it. It is an interface of its own rather than two
// more methods on Locker so that implementations of Locker outside this
// package (wrappers, test doubles) keep compiling; code that needs sets
// asks for a KeySetLocker.
type KeySetLocker interface {
	Locker

	// LockMany acquires every key of keys, all or nothing: on each node
	// one atomic step sets them all or none, and the set is granted when
	// a quorum of nodes set them all within the validity. Duplicate keys
	// count once; the keys are taken in canonical (sorted) order, which
	// Lock.Keys returns. No keys, more than MaxKeys distinct keys, an
	// empty key, or a node that is not a MultiLocker (or refuses the set,
	// see KeySetChecker) is an error matching ErrInvalid. Otherwise it is
	// Lock for the set: the same strategy, errors and options; Extend,
	// Unlock, WithAutoRenew and WithFencing (Lock.Fences, one per key)
	// cover the whole set.
	LockMany(ctx context.Context, keys []string, opts ...Option) (*Lock, error)

	// DoMany is Do on the set of keys LockMany takes: fn runs while every
	// key is held, renewed together, and its context is cancelled if the
	// set is lost.
	DoMany(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error
}

var (
	_ KeySetLocker = (*Single)(nil)
	_ KeySetLocker = (*Redlock)(nil)
)

// LockMany acquires several keys at once on the node; see
// KeySetLocker.LockMany.
func (s *Single) LockMany(ctx context.Context, keys []string, opts ...Option) (*Lock, error) {
	return s.lockMany(ctx, keys, opts)
}

// DoMany runs fn while holding several keys; see KeySetLocker.DoMany.
func (s *Single) DoMany(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	return s.doMany(ctx, keys, fn, opts)
}

// LockMany acquires several keys at once on a quorum of the nodes; see
// KeySetLocker.LockMany.
func (r *Redlock) LockMany(ctx context.Context, keys []string, opts ...Option) (*Lock, error) {
	return r.lockMany(ctx, keys, opts)
}

// DoMany runs fn while holding several keys; see KeySetLocker.DoMany.
func (r *Redlock) DoMany(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	return r.doMany(ctx, keys, fn, opts)
}

// lockMany is LockMany for both lockers.
func (l *locker) lockMany(ctx context.Context, keys []string, opts []Option) (*Lock, error) {
	sc, err := l.prepareMany(ctx, keys, opts)
	if err != nil {
		return nil, err
	}
	return lockScope(ctx, sc)
}

// doMany is DoMany for both lockers.
func (l *locker) doMany(ctx context.Context, keys []string, fn func(context.Context) error, opts []Option) error {
	if fn == nil {
		return invalidf("nil function")
	}
	sc, err := l.prepareMany(ctx, keys, opts)
	if err != nil {
		return err
	}
	return doScope(ctx, sc, fn)
}

// prepareMany is prepare for a set of keys.
func (l *locker) prepareMany(ctx context.Context, keys []string, opts []Option) (scope, error) {
	if ctx == nil {
		return scope{}, invalidf("nil context")
	}
	set, err := canonicalKeys(keys)
	if err != nil {
		return scope{}, err
	}
	if err := checkKeySet(l.nodes, set); err != nil {
		return scope{}, err
	}
	cfg := l.cfg.with(opts)
	if err := cfg.validate(); err != nil {
		return scope{}, err
	}
	s := scope{key: setName(set), keys: set, what: keySet{}, nodes: l.nodes, cfg: &cfg}
	return s, cfg.validateNodes(l.nodes)
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
	if len(set) > MaxKeys {
		return nil, invalidf("%d distinct keys, more than MaxKeys (%d)", len(set), MaxKeys)
	}
	return slices.Clip(set), nil
}

// setName names a set in errors and events: "[a b c]".
func setName(keys []string) string { return "[" + strings.Join(keys, " ") + "]" }

// checkKeySet asks every node whether it can hold the set: each key
// (KeyChecker), the set together (KeySetChecker), and whether it can lock
// sets at all (MultiLocker).
func checkKeySet(nodes []Backend, set []string) error {
	for _, key := range set {
		if err := checkKey(nodes, key); err != nil {
			return err
		}
	}
	for _, b := range nodes {
		if _, ok := b.(MultiLocker); !ok {
			return invalidf("LockMany: node %q (%T) does not implement MultiLocker", b.Name(), b)
		}
		kc, ok := b.(KeySetChecker)
		if !ok {
			continue
		}
		if err := kc.CheckKeys(set); err != nil {
			if !errors.Is(err, ErrInvalid) {
				err = fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			return fmt.Errorf("node %q cannot hold keys %q together: %w", b.Name(), set, err)
		}
	}
	return nil
}

// keySet is the set s.keys, all or nothing: the Backend's MultiLocker
// methods.
type keySet struct{}

func (keySet) acquire(ctx context.Context, s scope, b Backend, token string) (bool, error) {
	return b.(MultiLocker).AcquireMany(ctx, s.keys, token, s.cfg.ttl)
}

func (keySet) acquireFenced(ctx context.Context, s scope, b Backend, token string, fences []int64) (bool, error) {
	return b.(MultiLocker).AcquireManyFenced(ctx, s.keys, token, s.cfg.ttl, fences)
}

func (keySet) raiseFence(ctx context.Context, s scope, b Backend, token string, fences []int64) (bool, error) {
	return b.(MultiLocker).RaiseFences(ctx, s.keys, token, fences)
}

func (keySet) release(ctx context.Context, s scope, b Backend, token string, announce bool) (bool, error) {
	return b.(MultiLocker).ReleaseMany(ctx, s.keys, token, announce)
}

func (keySet) extend(ctx context.Context, s scope, b Backend, token string, ttl time.Duration) (bool, error) {
	return b.(MultiLocker).ExtendMany(ctx, s.keys, token, ttl)
}

// notify subscribes to the release of every key of the set. A node that
// refused the set held at least one of its keys, and any of them may have
// been the one: a release of any key frees the node for the waiter's
// wake-up (notify.go), which makes an attempt that may find another key
// still held. Such an extra attempt costs a round; missing the release
// that freed the last held key would cost the whole backoff delay.
func (keySet) notify(ctx context.Context, s scope, n Notifier, released func(string)) (func(), error) {
	stops := make([]func(), 0, len(s.keys))
	stop := func() {
		for _, st := range stops {
			st()
		}
	}
	for _, key := range s.keys {
		st, err := n.Notify(ctx, key, released)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, st)
	}
	return stop, nil
}
