package redlock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"time"
)

// Fairness across processes: a queue of waiting Lock calls on the nodes.
//
// Hand-off (notify.go, line.go, handoff.go) keeps the waiters of one
// locker in arrival order, but waiters of different lockers (different
// processes) only learn that the key was released, and race for it: the
// process that released, already running, often takes the key straight
// back with its next Lock call, and the others wait for their luck.
// WithFairness makes a free key go to the Lock call that has waited
// longest, whichever process it runs in.
//
// Each node keeps, per lock key, a queue of waiting Lock calls (a sorted
// set, key + ":queue", and the entries' expiries, key + ":queue:exp";
// with Redis Cluster in the key's hash slot). An entry is a Lock call's
// ticket (random, drawn once per call) ordered by a score the client
// sends: the call's start, in microseconds of its wall clock, the same on
// every node and for every attempt of the call. A fair attempt
// (FairQueuer.AcquireFair, one script) adds or refreshes the caller's
// entry and sets the key, as SET NX does, only if the key is free and the
// entry is the queue's head; otherwise it refuses and reports how many
// entries are ahead.
//
// Why this is safe: the script never sets a key that exists; the queue
// only narrows who may take a free key, so exclusion rests on the key
// exactly as for Acquire, and quorum, validity, rollback and release are
// unchanged (attempt.go).
//
// Why the nodes agree: they all order by the same client-given scores, so
// on a release they name the same head, and at N > 1 fair waiters do not
// split the votes as racing ones do; they skip the hand-off gate and the
// random spread before a woken attempt (gate.go, acquire.go), which exist
// only against split votes. A waiter that lost its place on a node (the
// node granted in a round that fell short, and the grant was rolled back)
// regains it with its next attempt, since it brings the same score.
//
// Why a dead waiter does not block for long: every entry expires, by the
// node's clock, unless an attempt of its call refreshes it; each attempt
// sets it to live for about twice the current backoff delay plus two node
// timeouts (the next attempt comes before), never more than the TTL. So a
// waiter that died blocks a free key no longer than a holder that died
// would have held it. A grant keeps the entry at the head (the round may
// still fall short and be rolled back; the waiter must keep its place);
// the holder's Unlock removes it with the release, in one step
// (ReleaseFair), and it expires no later than the key itself would. A
// Lock call that ends without the lock (strategy exhausted, context over)
// leaves the queue on every node, and one that got the lock leaves it on
// the nodes that did not grant, each in a best-effort round detached from
// cancellation and bounded by the node timeout; a leave that is lost
// costs only the entry's expiry.
//
// Limits. The scores are wall-clock times of the processes' hosts, so
// clock skew between hosts tilts the order (not exclusion). A head that
// is alive but not woken (hand-off off, or an announcement lost) takes
// the key only when its backoff delay runs out, and the key stays free
// until then: fairness costs throughput without hand-off. Lockers without
// WithFairness use plain SET NX, ignore the queue and can barge in ahead
// of it. Fair locks are never transferred within a locker (handoff.go):
// the queue, not the locker's line, names the next holder (so within one
// process the option costs the transfers' gain). WithFairness applies to
// Lock, Do and an election's campaigns; fenced locks (WithFencing) are
// refused with it,
// and sets (LockMany), readers and writers, and semaphores ignore it.

// FairQueuer is the optional capability of a Backend that keeps the
// queues of WithFairness. New, NewSingle and Lock refuse WithFairness
// over a node that is not a FairQueuer, with ErrInvalid.
type FairQueuer interface {
	// AcquireFair first drops the key's queue entries whose expiry (node
	// time) has passed, then adds ticket to the queue with score (or
	// refreshes it: the score is replaced, the expiry set to now + stay).
	// If key does not exist and ticket is then the queue's head (lowest
	// score; equal scores in ticket order), it sets key to token with the
	// TTL and reports true; the entry stays (a round that falls short of a
	// quorum is rolled back with Release, and the waiter keeps its place),
	// until ReleaseFair, LeaveQueue or its expiry removes it. Otherwise it
	// reports false and the number of entries ahead of ticket. One atomic
	// step (FairLua.Acquire); a key that exists is never set.
	AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration) (ok bool, ahead int64, err error)

	// LeaveQueue removes ticket from key's queue, if there (FairLua.Leave).
	LeaveQueue(ctx context.Context, key, ticket string) error

	// ReleaseFair is Release (announcing as Release does) that also
	// removes ticket from key's queue, in the same step, whether or not
	// key held token (FairLua.Release).
	ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error)
}

// QueueKeys returns the names of key's queue and of its entries'
// expiries, the keys FairLua's scripts take after the lock key.
func QueueKeys(key string) (queue, expiries string) {
	return key + ":queue", key + ":queue:exp"
}

var (
	//go:embed acquire_fair.lua
	acquireFairLua string
	//go:embed leave_queue.lua
	leaveQueueLua string
	//go:embed release_fair.lua
	releaseFairLua string
)

// FairLua holds the scripts of FairQueuer, as Lua holds the others':
//
//   - Acquire: KEYS[1] lock key, KEYS[2] and KEYS[3] its queue and
//     expiries (QueueKeys); ARGV[1] token, ARGV[2] TTL in ms, ARGV[3]
//     ticket, ARGV[4] score, ARGV[5] stay in ms. Replies 1 if it set the
//     key, otherwise minus the number of entries ahead of the ticket.
//   - Leave: KEYS[1] and KEYS[2] the queue and expiries; ARGV[1] ticket.
//     Replies 1 if the ticket was queued, 0 otherwise.
//   - Release: KEYS[1] lock key, KEYS[2] and KEYS[3] its queue and
//     expiries; ARGV[1] token, ARGV[2] announce flag (as Lua.Release),
//     ARGV[3] ticket. Removes the ticket; deletes the key if it holds the
//     token, announcing as Lua.Release; replies 1 if deleted, 0 otherwise.
var FairLua = struct{ Acquire, Leave, Release string }{acquireFairLua, leaveQueueLua, releaseFairLua}

// WithFairness makes Lock and Do calls take a free key in the order the
// calls started, across every locker (process) that uses it for the key:
// see FairQueuer and the package notes in fair.go. Every node must be a
// FairQueuer (both adapters are). It is meant for calls that wait (Retry)
// with hand-off on; it cannot be combined with WithFencing (ErrInvalid).
func WithFairness() Option { return func(c *config) { c.fair = true } }

// fairMargin pads an entry's stay beyond the next attempt's expected
// time, for scheduling delays.
const fairMargin = 10 * time.Millisecond

// fairKey is the mutex on s.key taken through the queue: oneKey whose
// acquire is AcquireFair with the Lock call's ticket. Unlike oneKey it
// carries data (one per Lock call), and it is not oneKey, so a fair lock
// is never transferred (scope.transferable).
type fairKey struct {
	oneKey
	ticket string
	score  int64
	delay  time.Duration // the current backoff delay (0 before the first)
	stay   time.Duration // set before each attempt's round, read during it
}

func newFairKey(clk Clock) *fairKey {
	return &fairKey{ticket: rand.Text(), score: clk.Now().UnixMicro()}
}

func (f *fairKey) acquire(ctx context.Context, s scope, b Backend, token string) (bool, error) {
	ok, _, err := b.(FairQueuer).AcquireFair(ctx, s.key, token, s.cfg.ttl, f.ticket, f.score, f.stay)
	return ok, err
}

// fairHeld is the target of a lock taken through the queue: its release
// also removes the Lock call's queue entry (ReleaseFair). The waiter's
// rollbacks use fairKey's, plain Release, which keeps the entry.
type fairHeld struct {
	oneKey
	ticket string
}

func (f fairHeld) release(ctx context.Context, s scope, b Backend, token string, announce bool) (bool, error) {
	return b.(FairQueuer).ReleaseFair(ctx, s.key, token, f.ticket, announce)
}

// plan sets the stay of the entry that the next attempt refreshes: the
// attempt after it comes within about twice delay (the current backoff
// delay; Retry doubles it), or for a first attempt within Retry's base.
func (f *fairKey) plan(cfg *config) {
	next := 2 * f.delay
	if f.delay <= 0 {
		next = cfg.ttl
		if r, ok := cfg.strategy.(retry); ok {
			next = r.base
		}
	}
	f.stay = min(max(next, 0)+2*cfg.timeout()+fairMargin, cfg.ttl)
}

// fair returns the waiter's fairKey, or nil.
func (w *waiter) fair() *fairKey {
	f, _ := w.what.(*fairKey)
	return f
}

// leaveQueue ends a fair Lock call's stay in the queues. With the lock,
// the lock's release will remove the entry (fairHeld) on the nodes that
// granted it, and leaveQueue removes it on the others now; without, on
// every node. Best effort, detached from cancellation, bounded by the
// node timeout.
func (w *waiter) leaveQueue(ctx context.Context, lock *Lock) {
	f := w.fair()
	if f == nil || w.attempts == 0 {
		return
	}
	nodes, got := w.nodes, lock != nil
	if got {
		lock.what = fairHeld{ticket: f.ticket} // before anyone else sees lock
		nodes = nil
		for i, err := range w.last {
			if err != nil {
				nodes = append(nodes, w.nodes[i])
			}
		}
		if len(nodes) == 0 {
			return
		}
	}
	key, ticket := w.key, f.ticket // the closure captures no waiter, which stays on Lock's stack
	w.on(nodes).fanOut(context.WithoutCancel(ctx), "leave queue", nil,
		func(ctx context.Context, _ int, b Backend) (bool, error) {
			return true, b.(FairQueuer).LeaveQueue(ctx, key, ticket)
		})
}

// validateFair checks WithFairness against the other options and nodes.
func (c *config) validateFair(nodes []Backend) error {
	if !c.fair {
		return nil
	}
	if c.fencing {
		return invalidf("WithFairness cannot be combined with WithFencing")
	}
	for _, b := range nodes {
		if _, ok := b.(FairQueuer); !ok {
			return invalidf("WithFairness: node %q (%T) does not implement FairQueuer", b.Name(), b)
		}
	}
	return nil
}
