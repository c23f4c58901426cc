package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leader election with terms. Leadership of an election is a fenced lock
// on the election's key, renewed while held: the leader's term is the
// lock's fencing token (WithFencing), strictly greater than every earlier
// leader's, and the leader's value travels in the lock's token (the random
// part, tokenSeparator, then the value), so that anyone can read who leads
// from the nodes (Leader, Observe). docs/election.md has the argument.

// maxValueLen is the longest value a campaign may announce, in bytes. The
// value is part of the lock's token, sent with every extension.
const maxValueLen = 1024

// ErrNoLeader means that no campaign holds the election's key on a quorum
// of the nodes: nobody leads (the last leader resigned, or its lease
// expired), or an election is under way.
var ErrNoLeader = errors.New("redlock: no leader")

// errResigned is the cause of a Leadership's context after Resign.
var errResigned = errors.New("redlock: leadership resigned")

// tokenSeparator follows the random part of a campaign's token (a UUID,
// tokenRandomLen bytes); the value comes after it.
const tokenSeparator = '|'

// An Election is one named election over a Redlock: campaigns
// for its leadership (Campaign), and reads of who leads (Leader,
// Observe). It holds no state of its own on the client beyond its
// configuration and is safe for concurrent use; build one per name and
// share it.
type Election struct {
	name  string
	lk    *Redlock
	opts  []Option // the caller's options, then the election's own
	cfg   config   // the merged configuration, for Leader and Observe
	retry time.Duration
}

// NewElection returns the election name over l. The election holds the lock key
// name (and its fence counter, name + ":fence"): use a name no lock of
// yours uses, with a hash tag on a Redis Cluster node ("{scheduler}").
//
// opts are lock options for the leadership (WithTTL: the lease, renewed
// every TTL/3; WithNodeTimeout;
// WithObserver...). The election sets four itself, overriding any given:
// WithFencing (the term), WithAutoRenew (the lease renews itself),
// WithFairness(false) (campaigns race; none queues), and the campaign
// strategy: a retry every TTL/10 with no limit, so only
// Campaign's context ends a campaign, and a release wakes a waiting
// campaign at once (hand-off, unless WithHandoff(false)). Bad input (a nil
// locker, an empty name, options that fail validation) is an error
// matching ErrInvalid.
func NewElection(l *Redlock, name string, opts ...Option) (*Election, error) {
	if l == nil {
		return nil, invalidf("NewElection: nil locker")
	}
	if err := checkKey(l.nodes, name); err != nil {
		return nil, fmt.Errorf("NewElection: %w", err)
	}
	e := &Election{name: name, lk: l}
	lk := l
	ttl := lk.cfg.with(opts).ttl
	e.retry = max(ttl/10, time.Millisecond)
	e.opts = append(append([]Option(nil), opts...), WithFencing(), WithFairness(false), WithAutoRenew(), WithStrategy(retryForever(e.retry)))
	e.cfg = lk.cfg.with(e.opts)
	if err := e.cfg.validate(); err != nil {
		return nil, fmt.Errorf("NewElection %q: %w", name, err)
	}
	return e, nil
}

// Name returns the election's name, its lock key.
func (e *Election) Name() string { return e.name }

// Campaign waits until this caller leads the election, announcing value
// (non-empty, at most 1024 bytes: who leads, such as a host name
// or an address) to the readers of Leader and Observe. It returns once the
// lock on the election's key is granted, with a fencing token that is the
// term. Meanwhile it retries every TTL/10, and at once when the leader
// resigns (hand-off); campaigns of one Election's locker take turns in
// arrival order. Only ctx ends the wait: then the error matches
// ErrNotAcquired and ctx's error. ErrUnavailable is never final: a
// campaign keeps trying while too few nodes answer.
//
// ctx bounds only the wait: the leadership outlives it, until Resign or
// the loss of the lease. The Leadership must be resigned, since its lease
// renews itself until then.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := checkValue(value); err != nil {
		return nil, err
	}
	opts := append(e.opts[:len(e.opts):len(e.opts)], withTokenSuffix(string(tokenSeparator)+value))
	s, err := e.lk.prepare(ctx, e.name, opts)
	if err != nil {
		return nil, err
	}
	l, err := acquire(ctx, s)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	l.onLost = cancel // set before the heartbeat can call it
	l.startRenewal(ctx)
	return &Leadership{lock: l, value: value, ctx: lctx, cancel: cancel}, nil
}

// checkValue checks a campaign's value.
func checkValue(v string) error {
	switch {
	case v == "":
		return invalidf("Campaign: empty value")
	case len(v) > maxValueLen:
		return invalidf("Campaign: value of %d bytes, more than %d", len(v), maxValueLen)
	}
	return nil
}

// Leadership is a won campaign: this caller leads until it resigns or
// its lease is lost. It is safe for concurrent use.
type Leadership struct {
	lock   *Lock
	value  string
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Term returns the leadership's term: the fencing token of its lock,
// strictly greater than every earlier leader's term of this election.
// Send it with every write the leader makes to a resource that can refuse
// a stale leader's writes (docs/fencing.md).
func (l *Leadership) Term() int64 { return l.lock.Fence() }

// Value returns the value the campaign announced.
func (l *Leadership) Value() string { return l.value }

// Until returns the end of the lease's current validity (see Lock.Until).
func (l *Leadership) Until() time.Time { return l.lock.Until() }

// Lost returns a channel closed when the leadership ends: a renewal failed
// on quorum or the validity ran out first (see Lock.Lost), or Resign was
// called.
func (l *Leadership) Lost() <-chan struct{} { return l.lock.Lost() }

// Context returns a context that ends with the leadership: on a lost
// lease its cause matches ErrLockLost; after Resign it is cancelled too.
// It carries the values of Campaign's context, not its cancellation. Run
// the leader's work under it.
func (l *Leadership) Context() context.Context { return l.ctx }

// Resign gives up the leadership: it stops the renewal, cancels Context,
// and releases the key on every node, announcing the release so that a
// waiting campaign wins at once. It runs even when ctx is already
// cancelled, bounded by the per-node timeout. Its error is Lock.Unlock's:
// nil, or matching ErrNotHeld when the lease had already been lost, or
// ErrUnavailable.
func (l *Leadership) Resign(ctx context.Context) error {
	l.cancel(errResigned)
	return l.lock.Unlock(ctx)
}
