package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// Internals the external tests (package redlock_test) check directly.
var (
	Quorum             = quorum
	DriftFor           = driftFor
	DefaultTTL         = defaultTTL
	DefaultDriftFactor = defaultDriftFactor
	NewToken           = newToken
	ReleaseChannel     = releaseChannel
)

// The documented bounds.
const (
	MaxKeys     = maxKeys
	MaxPermits  = maxPermits
	MaxValueLen = maxValueLen
	MaxKeyLen   = maxKeyLen
)

// GateFor returns the index of key's gate among nodes.
func GateFor(key string, nodes []driver.Node) int {
	ns, err := newNodes(nodes)
	if err != nil {
		panic(err)
	}
	return gateFor(key, ns)
}

// QueueKeys returns the names of key's fair queue, of its entries'
// expiries and of their grants.
func QueueKeys(key string) (queue, expiries, grants string) {
	k := queueKeys(key)
	return k[1], k[2], k[3]
}

// RaceEnabled: the test binary runs under the race detector (allocation
// counts are checked only without it).
const RaceEnabled = raceEnabled

// InLine counts l's waiters in line for key that hear its releases (a
// waiter joins its line before it subscribes: see Joined).
func InLine(l Locker, key string) int {
	ls := linesOf(l)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	if q := ls.m[key]; q != nil {
		for _, w := range q.waiters {
			if w.hearing {
				n++
			}
		}
	}
	return n
}

// Joined counts l's waiters in line for key, subscribed or not.
func Joined(l Locker, key string) int {
	ls := linesOf(l)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if q := ls.m[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Waiting reports whether l has waiters in line for key.
func Waiting(l Locker, key string) bool { return linesOf(l).waiting(key) }

// Contended reports whether l records key as contended (fair.go) now.
func Contended(l Locker, key string) bool {
	ls := linesOf(l)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	c, ok := ls.contended[key]
	return ok && time.Now().Before(c.until)
}

// LockerID returns l's id, which begins its fair calls' tickets.
func LockerID(l Locker) string { return linesOf(l).id }

func linesOf(l Locker) *lines { return l.(*Redlock).cfg.lines }

// Clock is the lockers' time source.
type Clock = clock

// WithRenewEvery sets the heartbeat's interval instead of TTL/3.
var WithRenewEvery = withRenewEvery

// WithClock replaces the system clock, for tests.
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// HandoffChain bounds consecutive transfers of a key within one locker.
const HandoffChain = handoffChain

// LastReleased returns the token l records as its last release of key
// that every node answered (lines.released), "" if none.
func LastReleased(l Locker, key string) string { return linesOf(l).lastReleased(key) }

// Ops runs the core's scripts on one node by hand, as a round's call
// would: what another process's lock, or a waiter that died, leaves.
type Ops struct{ n *node }

// On returns the Ops of d.
func On(d driver.Node) Ops {
	ns, err := newNodes([]driver.Node{d})
	if err != nil {
		panic(err)
	}
	return Ops{ns[0]}
}

func (o Ops) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return o.n.acquire(ctx, key, token, ttl)
}

func (o Ops) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	return o.n.release(ctx, key, token, announce)
}

func (o Ops) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	return o.n.acquireFenced(ctx, key, token, ttl, defaultFenceLife)
}

func (o Ops) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	return o.n.acquireFair(ctx, key, token, fairAttempt{ttl: ttl, ticket: ticket, score: score, stay: stay, attempt: attempt})
}

func (o Ops) Peek(ctx context.Context, key string) (string, int64, error) {
	return o.n.peek(ctx, key)
}
