// Package redlock is a distributed mutual-exclusion lock over Redis: a
// single-instance locker ([Single]) and the Redlock algorithm over N
// independent masters ([Redlock]), behind one pluggable [Backend] and one
// retry strategy engine.
//
// This package is the algorithm and imports no Redis client. A node is a
// Backend made by an adapter: package goredis adapts a go-redis v9 client
// (goredis.New: standalone masters, Redis Cluster and Sentinel), module
// rueidisnode a rueidis client. An adapter of your own implements
// [Backend] (and, for fencing, hand-off and keys it cannot hold, [Fencer],
// [Notifier] and [KeyChecker]), runs the scripts in [Lua], and proves
// itself with package backendtest. Package envconfig
// builds a Locker from LOCK_DISTRIBUTED_* variables; package httplock
// puts one in front of HTTP handlers.
//
// A lock is acquired with SET key token NX PX ttl (one atomic command) and a
// random token per acquisition; it is released by a Lua compare-and-delete
// (release.lua) so a holder can never delete someone else's lock.
//
// # Holding a lock
//
// [Locker.Do] runs a function under a lock, renewing it while the function
// runs and cancelling the function's context with a cause matching
// [ErrLockLost] if the lock is lost; a lock taken by hand can renew itself
// too ([WithAutoRenew], [Lock.Lost]). [WithFencing] hands every holder a
// strictly increasing fencing token ([Lock.Fence]) for the protected
// resource to check. Waiters under the Retry strategy are woken by the
// release instead of sleeping out their delay (hand-off, [WithHandoff]).
// An [Observer] sees every operation; nothing is logged by default.
//
// A [Semaphore] admits at most K holders of a name at once: its permits
// are locks on K slots, so a permit renews, is lost and is fenced like a
// lock, and the bound holds under the same assumptions as the lock's.
//
// # Leader election
//
// [NewElection] builds an election on a Single or a Redlock: [Election.Campaign]
// waits until the caller leads and returns a [Leadership] whose lease
// renews itself, whose term ([Leadership.Term]) is a fencing token
// strictly greater than every earlier leader's, and which ends on
// [Leadership.Resign] (handing over at once to a waiting campaign) or
// when the lease is lost. [Election.Leader] and [Election.Observe] read
// who leads from a quorum of the nodes (docs/election.md).
//
// # Safety assumptions
//
// A Redlock is safe while (1) the nodes' clocks run at the same rate as the
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
)

// A Locker acquires locks. *Single and *Redlock implement it, so code can
// be written against one node and deployed on five.
type Locker interface {
	// Lock acquires key, following the strategy when it is held. It
	// returns a *Lock valid until its Until, or an error matching
	// ErrNotAcquired, ErrTimeout, ErrUnavailable or ErrInvalid.
	Lock(ctx context.Context, key string, opts ...Option) (*Lock, error)

	// Do acquires key, runs fn, and releases the lock however fn ends:
	// normally, with an error, by panicking (the panic resumes once the
	// lock is released), or after ctx was cancelled. The release runs on
	// a context detached from ctx's cancellation, bounded by the per-node
	// timeout, so a cancelled request still lets go.
	//
	// While fn runs, a heartbeat extends the lock by the TTL every renew
	// interval (WithRenewEvery, default TTL/3), so fn may run for many
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
}

// locker is what Single and Redlock share: their nodes, their default
// options, and the lines of their waiters (config.lines).
type locker struct {
	nodes []Backend
	cfg   config
}

// Redlock is the Redlock algorithm over N independent Redis masters. Lock
// sets the key on all nodes concurrently, each call bounded by the per-node
// timeout, and grants the lock when a quorum (N/2+1) agreed and validity
// (TTL − elapsed − drift) is left; otherwise it releases at once on the
// nodes that granted or may have, and follows the strategy.
//
// Use an odd N: N = 2f+1 survives f failed nodes, and N = 2f+2 survives no
// more while costing one node more.
type Redlock struct {
	locker
}

// New returns a Redlock over nodes, which must be non-nil, distinct (by
// Name) and independent masters. opts are the defaults for every Lock.
func New(nodes []Backend, opts ...Option) (*Redlock, error) {
	cfg, err := setup(nodes, opts)
	if err != nil {
		return nil, err
	}
	return &Redlock{locker{nodes: append([]Backend(nil), nodes...), cfg: cfg}}, nil
}

// Lock acquires key on a quorum of the nodes. Cancelling ctx stops waiting
// at once (an in-flight round is bounded by the per-node timeout) and
// returns an error that matches both ErrNotAcquired and ctx's error.
func (r *Redlock) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return r.lock(ctx, key, opts)
}

// Do runs fn while holding key: it acquires the lock (following the
// strategy), runs fn with a context derived from ctx, and releases the
// lock when fn returns, panics, or gives up after its context was
// cancelled. See Locker.Do for the heartbeat and what a lost lock does.
func (r *Redlock) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return r.do(ctx, key, fn, opts)
}

// baseOf returns the locker inside a *Single or *Redlock, for the
// primitives built on one (user names the constructor, for errors): they
// need its nodes and configuration, which the Locker interface does not
// give, so a wrapping or foreign Locker is ErrInvalid.
func baseOf(l Locker, user string) (*locker, error) {
	switch v := l.(type) {
	case *Single:
		if v != nil {
			return &v.locker, nil
		}
	case *Redlock:
		if v != nil {
			return &v.locker, nil
		}
	default:
		if v != nil {
			return nil, invalidf("%s: %T is not a *Single or *Redlock of this package", user, l)
		}
	}
	return nil, invalidf("%s: nil locker", user)
}
