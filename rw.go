package redlock

import (
	"context"
	"time"
)

// Read-write locks (RLock, WLock, DoRead, DoWrite): any number of readers
// or one writer per key, with everything the mutex has (quorum and
// validity, rollback, Extend and renewal, fencing, hand-off, the
// observer). Readers and writers are two more targets (target.go) on the
// same rounds as the mutex.
//
// On each node one script per call (acquire_read.lua and its kin) keeps the readers, each
// with its own token and deadline, and the writer. The lock key itself
// holds the writer's token, or a marker while readers hold, so the key
// exists exactly while someone holds it: a writer is a mutex on the key,
// and a plain Lock (or LockMany) of the same key excludes readers and
// writers alike; it is a writer that does not ask for preference.
//
// Quorum: a reader and a writer, or two writers, each granted by a
// majority of the nodes, would share a node that granted both while both
// were live; that node refuses whichever came second (a live reader or
// writer makes the key exist, and a writer's SET NX fails; a writer's
// token in the key makes a reader's script refuse). So as for the mutex,
// at most one writer holds, and never together with a reader, within the
// validity of each. Readers do not exclude each other: any number of
// them can hold on the same majority.
//
// Writer preference: a writer refused on a node leaves a "writer waiting"
// mark there with a TTL of the lock's TTL, refreshed by each refused
// attempt and deleted when a writer is granted. New readers are refused
// while it exists, so a stream of readers cannot starve a writer: the
// readers that hold finish (or expire), the last one's release announces,
// and the writer takes the key. A writer that gives up or dies leaves a
// mark that ends on its own within a TTL. The mark lasts one TTL after
// the writer's latest attempt, so a writer whose backoff delays exceed
// its TTL lets new readers in between its attempts.

// RLock acquires a reader's share of key (see Locker.RLock). Readers
// share the key, each with a token and deadline of its own; a writer, or
// a plain Lock of the key, excludes them. Unlock, Extend, WithAutoRenew
// and WithFencing work on the share: its Fence is the latest fenced
// writer's, not incremented by readers.
func (r *Redlock) RLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return r.lockAs(ctx, reader{}, key, opts)
}

// WLock acquires key as its writer (see Locker.WLock): a plain lock on
// key that, while refused, leaves the "writer waiting" mark that keeps
// new readers out.
func (r *Redlock) WLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return r.lockAs(ctx, writer{}, key, opts)
}

// DoRead runs fn holding a reader's share of key; see Do.
func (r *Redlock) DoRead(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return r.doAs(ctx, reader{}, key, fn, opts)
}

// DoWrite runs fn holding key's writer lock; see Do.
func (r *Redlock) DoWrite(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return r.doAs(ctx, writer{}, key, fn, opts)
}

func (r *Redlock) lockAs(ctx context.Context, what target, key string, opts []Option) (*Lock, error) {
	s, err := r.prepareRW(ctx, what, key, opts)
	if err != nil {
		return nil, err
	}
	return lockScope(ctx, s)
}

// doAs is do for a reader or a writer.
func (r *Redlock) doAs(ctx context.Context, what target, key string, fn func(context.Context) error, opts []Option) error {
	if fn == nil {
		return invalidf("nil function")
	}
	s, err := r.prepareRW(ctx, what, key, opts)
	if err != nil {
		return err
	}
	return doScope(ctx, s, fn)
}

// prepareRW is prepare for a reader or a writer.
func (r *Redlock) prepareRW(ctx context.Context, what target, key string, opts []Option) (scope, error) {
	s, err := r.prepare(ctx, key, opts)
	if err != nil {
		return scope{}, err
	}
	s.what = what
	return s, nil
}

// reader is a reader's share of s.key (acquire_read.lua and its kin).
type reader struct{}

func (reader) acquire(ctx context.Context, s scope, n *node, token string) (bool, error) {
	ok, _, err := n.acquireRead(ctx, s.key, token, s.cfg.ttl, 0)
	return ok, err
}

func (reader) acquireFenced(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	ok, f, err := n.acquireRead(ctx, s.key, token, s.cfg.ttl, s.cfg.fenceLife)
	fences[0] = f
	return ok, err
}

func (reader) raiseFence(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	return n.raiseReadFence(ctx, s.key, token, fences[0], s.cfg.fenceLife)
}

func (reader) release(ctx context.Context, s scope, n *node, token string, announce bool) (bool, error) {
	return n.releaseRead(ctx, s.key, token, announce)
}

func (reader) extend(ctx context.Context, s scope, n *node, token string, ttl time.Duration) (bool, error) {
	return n.extendRead(ctx, s.key, token, ttl, s.cfg.fenceLife)
}

// notify: a refused reader waits for a writer's release, which announces
// on the key's channel like a mutex's.
func (reader) notify(ctx context.Context, s scope, n *node, released func(string)) (func(), error) {
	return n.notify(ctx, []string{s.key}, "", released)
}

// writer is s.key's writer: a mutex on the key (oneKey) whose acquire
// leaves the "writer waiting" mark when refused.
type writer struct{ oneKey }

func (writer) acquire(ctx context.Context, s scope, n *node, token string) (bool, error) {
	ok, _, err := n.acquireWrite(ctx, s.key, token, s.cfg.ttl, waitingMark(s.cfg), 0)
	return ok, err
}

func (writer) acquireFenced(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	ok, f, err := n.acquireWrite(ctx, s.key, token, s.cfg.ttl, waitingMark(s.cfg), s.cfg.fenceLife)
	fences[0] = f
	return ok, err
}

// waitingMark is how long a refused writer's "writer waiting" mark lasts:
// the lock's TTL, or nothing for a writer that will not try again
// (Reject, Retry with no retries), which must not keep readers out.
func waitingMark(cfg *config) time.Duration {
	if _, again := cfg.strategy.Backoff(0); !again {
		return 0
	}
	return cfg.ttl
}
