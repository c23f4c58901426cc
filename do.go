package redlock

import (
	"context"
	"errors"
	"fmt"
)

// Lock acquires key on a quorum of the nodes (see Locker.Lock), then
// starts the heartbeat when WithAutoRenew asked for one.
func (r *Redlock) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	s, err := r.prepare(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return lockScope(ctx, s)
}

// prepare checks a Lock or Do call's arguments and merges its options
// into the locker's.
func (r *Redlock) prepare(ctx context.Context, key string, opts []Option) (scope, error) {
	if ctx == nil {
		return scope{}, invalidf("nil context")
	}
	if err := checkKey(r.nodes, key); err != nil {
		return scope{}, err
	}
	cfg := r.cfg.forCall(opts)
	if err := cfg.validate(); err != nil {
		return scope{}, err
	}
	s := scope{key: key, what: oneKey{}, nodes: r.nodes, cfg: cfg}
	if cfg.fair {
		s.what = newFairKey(cfg)
	}
	return s, nil
}

// lockScope is lock after the arguments were checked, for one key or a set.
func lockScope(ctx context.Context, s scope) (*Lock, error) {
	l, err := acquire(ctx, s)
	if err != nil {
		return nil, err
	}
	if l.cfg.autoRenew {
		l.startRenewal(ctx)
	}
	return l, nil
}

// heldKey is the context key under which Do hands fn its lock.
type heldKey struct{}

// FromContext returns the lock that Do holds while it runs fn, from fn's
// context or one derived from it, and false elsewhere. fn reads its fencing
// token (Fence) there, to send with every write to the protected resource,
// and its validity (Until); Do renews and releases it, so fn must not call
// Unlock.
func FromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(heldKey{}).(*Lock)
	return l, ok
}

// Do runs fn while holding key (see Locker.Do).
func (r *Redlock) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return invalidf("nil function")
	}
	s, err := r.prepare(ctx, key, opts)
	if err != nil {
		return err
	}
	return doScope(ctx, s, fn)
}

// doScope is do after the arguments were checked, for one key or a set.
func doScope(ctx context.Context, s scope, fn func(context.Context) error) (err error) {
	if err := s.cfg.validateRenewal(); err != nil {
		return err
	}
	l, err := acquire(ctx, s)
	if err != nil {
		return err
	}
	return hold(ctx, l, fn)
}

// hold runs fn while holding l, as Do describes: the heartbeat renews l,
// its loss cancels fn's context, and l is released however fn ends.
func hold(ctx context.Context, l *Lock, fn func(context.Context) error) (err error) {
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, heldKey{}, l))
	l.onLost = cancel // set before the heartbeat can call it
	l.startRenewal(ctx)
	// Deferred so that it also runs while fn panics; the panic then goes on
	// with its original stack once the lock is released.
	defer func() {
		l.stopRenewal()
		cancel(nil)
		uerr := l.Unlock(ctx) // detached from ctx's cancellation, bounded by the node timeout
		switch cause := l.lossCause(); {
		case cause != nil:
			err = errors.Join(cause, err)
		case errors.Is(uerr, ErrNotHeld):
			// Validity ran out between the last heartbeat and the release,
			// or the nodes had already dropped our key: fn may have
			// overlapped with the next holder.
			err = errors.Join(fmt.Errorf("%w: %w", ErrLockLost, uerr), err)
		}
		// Any other release failure (too few nodes answered) is reported to
		// the observer but not returned: fn's work is done, and the keys
		// expire by themselves within the TTL.
	}()
	return fn(fctx)
}

// Unlock releases key where it holds token, on every node, as the Unlock
// of the Lock that token belongs to would: for a process that did not
// take the lock, such as an operator's tool releasing a crashed job's
// lock by its token (Lock.Token). It never deletes a key that holds
// another token. It returns nil when a quorum of the nodes released the
// key, an error matching ErrNotHeld when too few held token, and one
// matching ErrUnavailable when too few answered.
func (r *Redlock) Unlock(ctx context.Context, key, token string) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if token == "" {
		return invalidf("empty token")
	}
	if err := checkKey(r.nodes, key); err != nil {
		return err
	}
	s := scope{key: key, what: oneKey{}, nodes: r.nodes, cfg: &r.cfg}
	if rr := s.releaseAll(ctx, token); rr.granted < quorum(len(r.nodes)) {
		return rr.quorumError("release", key, 0)
	}
	return nil
}

// maxKeyLen bounds a key's length: a key is stored on every node, sent
// with every command and quoted in errors, and no real lock needs more.
const maxKeyLen = 1024

// checkKey refuses, before the first attempt, a key that is empty, too
// long, or that some node cannot hold (a Redis Cluster needs the key's
// names in one hash slot), so that a bad key fails at once instead of
// costing a node's vote in every round.
func checkKey(nodes []*node, key string) error {
	if key == "" {
		return invalidf("empty key")
	}
	if len(key) > maxKeyLen {
		return invalidf("key %q is %d bytes, longer than %d", shorten(key), len(key), maxKeyLen)
	}
	for _, n := range nodes {
		if _, err := n.keyOf(key); err != nil {
			return err
		}
	}
	return nil
}
