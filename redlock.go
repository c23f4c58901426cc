// Package redlock is a distributed mutual-exclusion lock over Redis: one
// algorithm, the Redlock, over one node ([NewSingle]) or N independent
// masters ([New]), with one retry strategy engine.
//
// This package is the algorithm and the application's API; it imports no
// Redis client. A node is a [driver.Node] made by an adapter: package
// goredis adapts a go-redis v9 client (standalone masters, Redis Cluster,
// Sentinel), module rueidisnode a rueidis client. The core owns every
// script; an adapter only runs them. Package envconfig builds a locker
// from LOCK_DISTRIBUTED_* variables; package httplock puts one in front
// of HTTP handlers.
//
// A lock is acquired with SET key token NX PX ttl and a random token per
// attempt; it is released by a Lua compare-and-delete (release.lua), so a
// holder never deletes someone else's lock.
//
// # Holding a lock
//
// [Locker.Do] runs a function under a lock, renewing it while the function
// runs and cancelling the function's context with a cause matching
// [ErrLockLost] if the lock is lost; a lock taken by hand can renew itself
// too ([WithAutoRenew], [Lock.Lost]). [WithFencing] hands every holder a
// strictly increasing fencing token ([Lock.Fence]) for the protected
// resource to check. Waiters are woken by the release instead of sleeping
// out their delay ([WithHandoff]), and take a free key in the order they
// asked ([WithFairness]). An [Observer] sees every operation; nothing is
// logged by default.
//
// [Locker.LockMany] takes several keys at once, all or nothing;
// [Locker.RLock] and [Locker.WLock] are the shares of a read-write lock. A
// [Semaphore] admits at most K holders of a name at once. An [Election]
// elects one leader among campaigns, with terms that are fencing tokens.
//
// # Safety assumptions
//
// A lock is safe while (1) the nodes' clocks run at the same rate as the
// client's within the drift factor, and (2) a node that restarts either
// keeps its data (AOF with fsync) or stays down for at least the TTL before
// it rejoins. Break (1) and a node may expire a key early; break (2) and a
// node forgets a key it granted. Either lets a second client assemble a
// quorum while the first still believes it holds the lock. No lock can
// protect a holder that pauses (GC, swap) past its validity; fencing
// tokens let the protected resource reject such a stale holder.
package redlock

import (
	"context"

	"github.com/quorumlock/redlock/driver"
)

// A Locker acquires locks. *Redlock implements it; wrappers (tracing,
// a disabled configuration) implement it too, so code written against a
// Locker runs on one node or five, observed or not.
type Locker interface {
	// Lock acquires key, following the strategy when it is held. It
	// returns a *Lock valid until its Until, or an error matching
	// ErrNotAcquired, ErrTimeout, ErrUnavailable or ErrInvalid.
	// Cancelling ctx stops waiting at once (a round in flight is bounded
	// by the per-node timeout) and returns an error that matches both
	// ErrNotAcquired and ctx's error.
	Lock(ctx context.Context, key string, opts ...Option) (*Lock, error)

	// Do acquires key, runs fn, and releases the lock however fn ends:
	// normally, with an error, by panicking (the panic resumes once the
	// lock is released), or after ctx was cancelled. The release runs on
	// a context detached from ctx's cancellation, bounded by the per-node
	// timeout, so a cancelled request still lets go.
	//
	// While fn runs, a heartbeat extends the lock by the TTL every third
	// of the TTL, which leaves two more heartbeats' worth of validity
	// after one slow or failed round, so fn may run for many
	// TTLs; it stops as soon as fn returns. If an extension fails on
	// quorum, or validity runs out before one succeeds, fn's context is
	// cancelled at once with a cause matching ErrLockLost
	// (context.Cause(ctx)): fn should stop writing when its context ends.
	//
	// fn finds the lock in its context with FromContext: with WithFencing,
	// its Fence is the token to send with fn's writes.
	//
	// Do returns the acquisition's error if the lock was not acquired
	// (nothing ran), otherwise fn's error; when the lock was lost while fn
	// ran, an error matching ErrLockLost joined with fn's error, if any.
	// A release that fails only because too few nodes answered is
	// reported to the observer, not returned: fn's work is done and the
	// keys expire within the TTL.
	Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error

	// LockMany acquires every key of keys at once, all or nothing, with one
	// token (duplicates are ignored; at most 64 distinct keys). Each key
	// is an ordinary lock key: the set excludes every Lock of any of its
	// keys, and two sets exclude each other when they share a key. The
	// Lock's Key is the set's name, its Keys the keys in canonical
	// (sorted) order, and with WithFencing its Fences one token per key.
	LockMany(ctx context.Context, keys []string, opts ...Option) (*Lock, error)

	// DoMany is Do over LockMany's set.
	DoMany(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error

	// RLock acquires a reader's share of key: readers share the key with
	// each other, and exclude writers (WLock) and plain locks (Lock). A
	// reader is refused while a writer holds or waits.
	RLock(ctx context.Context, key string, opts ...Option) (*Lock, error)

	// WLock acquires key as its writer: a plain lock on key that, while
	// refused, keeps new readers out until it gets its turn.
	WLock(ctx context.Context, key string, opts ...Option) (*Lock, error)

	// DoRead is Do holding a reader's share (RLock).
	DoRead(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error

	// DoWrite is Do holding the writer's lock (WLock).
	DoWrite(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error
}

// Redlock is the Redlock algorithm over N independent Redis masters (N = 1:
// NewSingle). Lock sets the key on all nodes concurrently, each call
// bounded by the per-node timeout, and grants the lock when a quorum
// (N/2+1) agreed and validity (TTL − elapsed − drift) is left; otherwise it
// releases at once on the nodes that granted or may have, and follows the
// strategy.
//
// Use an odd N: N = 2f+1 survives f failed nodes, and N = 2f+2 survives no
// more while costing one node more.
type Redlock struct {
	nodes []*node
	cfg   config // the defaults of every call, and the lines of its waiters (config.lines)
}

var _ Locker = (*Redlock)(nil)

// New returns a Redlock over nodes, which must be non-nil, distinct (by
// name) and independent masters. opts are the defaults for every call.
func New(nodes []driver.Node, opts ...Option) (*Redlock, error) {
	ns, err := newNodes(nodes)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig().with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Redlock{nodes: ns, cfg: cfg}, nil
}
