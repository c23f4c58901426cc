package redlock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"sync/atomic"
	"time"
)

// Fairness across processes: a queue of waiting Lock calls on the nodes.
//
// Hand-off (notify.go, line.go, handoff.go) keeps the waiters of one
// locker in arrival order, but waiters of different lockers (different
// processes) only learn that the key was released, and race for it: the
// process that released, already running, often takes the key straight
// back with its next Lock call, and the others wait for their luck.
// The queue makes a free key go to the Lock call that has waited
// longest, whichever process it runs in.
//
// Fair once contended (the default). A Lock or Do call makes its first
// attempt as a plain SET NX, so an uncontended Lock+Unlock costs what it
// did without queues. When a quorum of the nodes refuses one of its
// attempts while its locker holds no lock of the key (each locker
// records the locks it holds, lines.holds), the holder is another
// locker's, and the call joins the queues for the rest of the call
// (joinQueues): its further attempts are fair ones, ordered by the time
// it was refused. Without this, the releasing process, already running,
// takes the key back with its next call more often than not, and waiters
// of other processes wait for their luck (BENCHMARKS.md: fewest ÷ most
// acquisitions per worker 0.50 with 8 processes on one node, 0.97 with
// the queue). A fair release grants the key to the queue's head, so a
// later call that would barge in finds it taken and queues in turn; only
// the release of a lock taken with a plain attempt (the first holder of
// a contention: it found the key free) just frees the key, and a call
// that finds it free then takes it ahead of the queue, once. Calls
// refused by their own locker's lock stay plain, in their locker's line,
// and take transfers (handoff.go) as before. A locker remembers, for a
// TTL, that another locker's lock refused one of its calls that then
// waited (markContended): its next default call on the key queues from
// its first attempt, subscribed first (subscribesFirst), as a
// WithFairness call would, instead of a plain attempt that would be
// refused and a fair one after it; it pays the queue's script, and a
// subscription, even if it finds the key free. WithFairness queues a
// call from its first attempt (so it also orders calls that find the
// key free between a release and the head's attempt); WithoutFairness
// never queues, the behaviour of plain Redlock clients.
//
// Each node keeps, per lock key, a queue of waiting Lock calls (a sorted
// set, key + ":queue", the entries' expiries, key + ":queue:exp", and
// their grants, key + ":queue:grant"; with Redis Cluster in the key's
// hash slot). An entry is a Lock call's ticket (random, drawn once per
// call) ordered by a score the client sends: the call's start, in
// microseconds of its wall clock, the same on every node and for every
// attempt of the call. A fair attempt (FairQueuer.AcquireFair, one
// script) adds or refreshes the caller's entry, registers the attempt's
// token and TTL as the entry's grant, and sets the key, as SET NX does,
// only if the key is free and the entry is the queue's head (or the key
// holds the entry's earlier grant, see below); otherwise it refuses and
// reports how many entries are ahead.
//
// The release of a fair lock (FairQueuer.ReleaseFair) hands the key on in
// the same step: having deleted it, it sets it to the head's registered
// token with the head's TTL (a grant) and announces "grant=" + the head's
// ticket + " " + that token. Only the head's waiter acts on it (notify.go:
// the others sleep on; without WithFairness a grant is no release at
// all), and it takes the lock without a round of its own when a quorum of
// its nodes granted its latest attempt's token (waiter.claim, below);
// otherwise its next attempt takes over each grant it finds (the key
// holds the entry's registered token: it is ours), with its own token.
// So a hand-off across processes costs one round, the release's, and the
// announcement's trip.
//
// A grant within the process. When the head is a waiter of the releasing
// Lock's own locker, the announcement would only travel from the node
// back to the process that sent the release, and wake its subscriber
// there as well as the releasing call. Over nodes whose started releases
// are GrantPendings (goredis's own connection), the release script
// returns such a grant instead of announcing it, and Unlock hands it to
// its waiter as each node's reply comes in (finishRelease), as the
// announcement would have, then yields its processor to the waiter it
// woke (lines.handGrant). One process, 8 workers, one node: the key held
// by nobody 162 → 145 µs between two holders (p50), 730 → 746
// acquisitions/s (BENCHMARKS.md, "A grant within the process"). A waiter
// that misses it (it was not yet in its locker's line) takes the grant
// over with its next attempt, which it makes once subscribed, as after a
// lost announcement; a release whose reply does not come tells the key's
// fair waiters of the locker that the node may have released unheard.
//
// Why this is safe: a script sets a key that exists only when it holds
// the token a release granted to the caller's own entry; the queue only
// narrows who may take a free key and to whom a release gives it, so
// exclusion rests on the key exactly as for Acquire, and quorum, validity,
// rollback and release are unchanged (attempt.go). A claim's validity
// counts from before the attempt whose token was granted (see claim).
//
// Why the nodes agree: they all order by the same client-given scores, so
// on a release they name the same head, and at N > 1 fair waiters do not
// split the votes as racing ones do; they skip the hand-off gate and the
// random spread before a woken attempt (gate.go, acquire.go), which exist
// only against split votes, and always make their first attempt at once
// (it queues them), whatever their place in their locker's line. A waiter
// that lost its place on a node (the node granted in a round that fell
// short, and the grant was rolled back) regains it with its next attempt,
// since it brings the same score.
//
// Why a dead waiter does not block for long: every entry expires, by the
// node's clock, unless an attempt of its call refreshes it; each attempt
// sets it to live for about twice the current backoff delay plus two node
// timeouts (the next attempt comes before), never more than the TTL. A
// release that comes while a dead waiter is still the head grants it the
// key, which then stays taken until its TTL runs out, as a dead holder's
// would; so a waiter that died blocks a key no longer than a holder that
// died would have held it. A grant keeps the entry at the head (the
// round may still fall short and be rolled back; the waiter must keep its
// place); the holder's Unlock removes it with the release, in one step
// (ReleaseFair), and it expires no later than the key itself would. A
// Lock call that ends without the lock (strategy exhausted, context over)
// leaves the queue on every node, and one that got the lock by an attempt
// leaves it on the nodes that did not grant, each in a best-effort round
// detached from cancellation and bounded by the node timeout; leaving
// also gives back a grant that came too late, handing it on. A leave
// that is lost costs the entry's expiry, or a grant's TTL.
//
// Why a contended call subscribes first: a fair call attempts at once
// (it queues it), and one that is refused then subscribes and attempts
// again, since a release between its attempt and its subscription would
// not have been announced to it. A locker remembers, for a TTL, that one
// of its fair calls found the key taken (markContended); its next fair
// call on the key subscribes before its first attempt (subscribesFirst),
// and so does its next default call when the lock that refused the
// earlier one was another locker's,
// so that one attempt does both (queues, and is the one a grant names),
// and a waiter far back waits for its grant from the first delay on.
//
// Limits. The scores are wall-clock times of the processes' hosts, so
// clock skew between hosts tilts the order (not exclusion). A head that
// is alive but not woken (hand-off off, an announcement lost, or a
// grant within the process returned to a release call that had given up
// on the node: the command ran late, after its caller's timeout) takes
// its grant, or the free key, only when its backoff delay runs out, and
// the grant's TTL bounds the key's wait in any case. A
// waiter two places or more behind makes no attempt while it can wait
// for its grant (waitsForGrant); if the entries ahead of it expire
// unannounced (their waiters died), it learns it at its entry's next
// refresh, not at its next delay.
// Calls WithoutFairness (and plain Redlock clients of other libraries)
// use plain SET NX, ignore the queue and can barge in ahead of it, but
// seldom find the key free while fair waiters are queued. goredis nodes
// WithReplicaAck do not grant (a grant, set by the releaser's script, is
// waited for by no replica acknowledgement): their releases only name
// the head, which acquires itself. Fair locks are never transferred
// within a locker (handoff.go): the queue, not the locker's line, names
// the next holder; and a plain lock is not transferred while the queue
// has an entry (ErrWaitersQueued): its Unlock releases to the head. The queues serve Lock, Do and an election's
// campaigns; fenced locks (WithFencing) are refused with WithFairness
// and never join by default, and sets (LockMany), readers and writers,
// and semaphores ignore them.

// FairQueuer is the optional capability of a Backend that keeps the
// queues. New, NewSingle and Lock refuse WithFairness over a node that
// is not a FairQueuer, with ErrInvalid; without WithFairness, calls over
// such nodes never join a queue.
type FairQueuer interface {
	// AcquireFair first drops the key's queue entries whose expiry (node
	// time) has passed, then adds ticket to the queue with score (or
	// refreshes it: the score is replaced, the expiry set to now + stay)
	// and registers token and ttl as what a release grants the entry,
	// unless a call with a greater attempt (the attempt's number within
	// its Lock call) registered already. If key does not exist and ticket
	// is then the queue's head (lowest score; equal scores in ticket
	// order), or key holds the token registered for ticket by a smaller
	// attempt (a release granted it), it
	// sets key to token with the TTL and reports true; the entry stays (a
	// round that falls short of a quorum is rolled back with Release, and
	// the waiter keeps its place), until ReleaseFair, LeaveQueue or its
	// expiry removes it. Otherwise it reports false and the number of
	// entries ahead of ticket. One atomic step (FairLua.Acquire); a key
	// that holds anyone else's token is never set.
	AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (ok bool, ahead int64, err error)

	// LeaveQueue removes ticket from key's queue, if there, and deletes
	// key if it holds the token a release granted to ticket, handing it
	// on as ReleaseFair does (FairLua.Release without a token, announced).
	LeaveQueue(ctx context.Context, key, ticket string) error

	// ReleaseFair removes ticket from key's queue and deletes key if it
	// holds token or the token a release granted to ticket, in one step
	// (FairLua.Release). Having deleted it, it hands the key on to the
	// queue's head: it sets key to the token the head registered, with
	// its TTL, and announces "grant=" + the head's ticket + " " + that
	// token; or, when the node cannot vouch for such a grant (goredis
	// WithReplicaAck: an acquisition must wait for the replicas), it
	// only names the head: "next=" + ticket + " " + token. Either goes to
	// the head's locker's channel (NotifyGrants) when its ticket names
	// one, else to the key's. With no head it announces as Release does.
	// With announce false (hand-off off) it neither grants nor announces:
	// the head takes the free key with its next attempt.
	ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error)

	// NotifyGrants is Notify for a fair waiter: it calls granted with
	// the announcements on the key's release channel, as Notify does, and
	// with those of ReleaseFair and LeaveQueue that grant the key to, or
	// name, a ticket that begins with locker + ".", which go to that
	// locker's channel alone, GrantChannel(key, locker), so that only the
	// process the next holder runs in hears them. It subscribes both
	// channels in one round (a fair waiter pays one subscription per
	// node, not two) and returns once both are active.
	NotifyGrants(ctx context.Context, key, locker string, granted func(payload string)) (func(), error)
}

// GrantChannel is the channel on which a fair release announces a grant
// to, or names, a waiter of locker: ReleaseChannel(key) + ":" + locker
// (with Redis Cluster, of the mapped key, so it hashes to its slot).
func GrantChannel(key, locker string) string { return ReleaseChannel(key) + ":" + locker }

// QueueKeys returns the names of key's queue, of its entries' expiries
// and of their grants, the keys FairLua's scripts take after the lock
// key.
func QueueKeys(key string) (queue, expiries, grants string) {
	return key + ":queue", key + ":queue:exp", key + ":queue:grant"
}

var (
	//go:embed acquire_fair.lua
	acquireFairLua string
	//go:embed release_fair.lua
	releaseFairLua string
)

// FairLua holds the scripts of FairQueuer, as Lua holds the others':
//
//   - Acquire: KEYS[1] lock key, KEYS[2], KEYS[3] and KEYS[4] its queue,
//     expiries and grants (QueueKeys); ARGV[1] token, ARGV[2] TTL in ms,
//     ARGV[3] ticket, ARGV[4] score, ARGV[5] stay in ms, ARGV[6] attempt.
//     Replies 1 if it set the key, otherwise minus the number of entries
//     ahead of the ticket.
//   - Release: KEYS as Acquire's; ARGV[1] token ("" to leave the queue
//     without a lock), ARGV[2] announce flag (as Lua.Release), ARGV[3]
//     ticket, ARGV[4] "1" to grant the key to the next waiter, "0" to
//     name it only. Replies 1 if it deleted the key, 0 otherwise.
var FairLua = struct{ Acquire, Release string }{acquireFairLua, releaseFairLua}

// WithFairness makes Lock and Do calls take a free key in the order the
// calls started, across every locker (process) that uses it for the key:
// see FairQueuer and the package notes in fair.go. Without it a call
// joins the same queues once it finds the key held by another locker
// (fair once contended); with it, from its first attempt. Every node must
// be a FairQueuer (both adapters are). It is meant for calls that wait
// (Retry) with hand-off on; it cannot be combined with WithFencing
// (ErrInvalid).
func WithFairness() Option { return func(c *config) { c.fair, c.unfair = true, false } }

// WithoutFairness makes Lock and Do calls never join the queues: every
// attempt is a plain SET NX, and a free key goes to whichever attempt
// reaches it first. Without either option a call joins the queues once
// the key proved taken by another locker (see "Fair once contended" in
// fair.go); of WithFairness and WithoutFairness the later one given wins.
func WithoutFairness() Option { return func(c *config) { c.fair, c.unfair = false, true } }

// fairMargin pads an entry's stay beyond the next attempt's expected
// time, for scheduling delays.
const fairMargin = 10 * time.Millisecond

// fairKey is the mutex on s.key taken through the queue: oneKey whose
// acquire is AcquireFair with the Lock call's ticket. Unlike oneKey it
// carries data (one per Lock call), and it is not oneKey, so a fair lock
// is never transferred (scope.transferable).
type fairKey struct {
	oneKey
	ticket  string
	score   int64
	delay   time.Duration // the current backoff delay (0 before the first)
	stay    time.Duration // set before each attempt's round, read during it
	start   time.Time     // read before the latest attempt was sent (its token: wakeup.grantTok)
	attempt int64         // that attempt's number (waiter.attempts)
	// behind counts the nodes on which the latest attempt found two
	// entries or more ahead in the queue (set by its round's calls, which
	// all end before the round does; reset before the next).
	behind atomic.Int32
}

// newFairKey draws a Lock call's ticket: its locker's id, ".", and
// random text (so a release can address the grant to the locker).
func newFairKey(cfg *config) *fairKey {
	return &fairKey{ticket: cfg.lines.id + "." + rand.Text(), score: cfg.clock.Now().UnixMicro()}
}

func (f *fairKey) acquire(ctx context.Context, s scope, b Backend, token string) (bool, error) {
	return f.counted(b.(FairQueuer).AcquireFair(ctx, s.key, token, s.cfg.ttl, f.ticket, f.score, f.stay, f.attempt))
}

// splits: a fair call's rounds (its attempts, and plain rollbacks) run as
// started calls over nodes that are all FairStarters (scope.split).
func (*fairKey) splits(op string, nodes []Backend) bool { return fairSplits(op, nodes) }

// splits: so do the release and extend of a lock taken through the queue.
func (fairHeld) splits(op string, nodes []Backend) bool { return fairSplits(op, nodes) }

func fairSplits(op string, nodes []Backend) bool {
	return (op == "acquire" || op == "release" || op == "extend") && lacking[FairStarter](nodes) == nil
}

// AcquireFair starts the node's AcquireFair; split allows it only over
// FairStarters. Its answer, known at finish, goes through the fairKey's
// count (fairKey.counted) there.
func (d *starting) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	d.fp = d.Backend.(FairStarter).StartAcquireFair(ctx, key, token, ttl, ticket, score, stay, attempt)
	return false, 0, nil
}

// ReleaseFair starts the node's ReleaseFair; split allows it only over
// FairStarters.
func (d *starting) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	d.p = d.Backend.(FairStarter).StartReleaseFair(ctx, key, token, ticket, announce)
	return false, nil
}

// LeaveQueue and NotifyGrants, never in a split round, go to the node:
// with them the stand-in is a FairQueuer, as its node.
func (d *starting) LeaveQueue(ctx context.Context, key, ticket string) error {
	return d.Backend.(FairQueuer).LeaveQueue(ctx, key, ticket)
}

func (d *starting) NotifyGrants(ctx context.Context, key, locker string, granted func(payload string)) (func(), error) {
	return d.Backend.(FairQueuer).NotifyGrants(ctx, key, locker, granted)
}

// counted returns a node's answer to an attempt, counting the node in
// behind if it found two entries or more ahead (a started call's answer
// comes at its finish: fanOutStarted).
func (f *fairKey) counted(ok bool, ahead int64, err error) (bool, error) {
	if err == nil && !ok && ahead > 1 {
		f.behind.Add(1)
	}
	return ok, err
}

// notify subscribes a fair waiter to the key's releases and to its
// locker's grant channel, where a fair release addresses the grant
// (FairQueuer.NotifyGrants, one subscription for both).
func (f *fairKey) notify(ctx context.Context, s scope, n Notifier, released func(string)) (func(), error) {
	return n.(FairQueuer).NotifyGrants(ctx, s.key, s.cfg.lines.id, released)
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

// finishRelease finishes node i's started release of a fair lock
// (releaseFinisher) and hands its answer to the locker's own waiters for
// the key (a grant within the process, above): a grant the node returned
// instead of announcing it (GrantPending) goes to the waiter it names, as
// its announcement would have. When the release's outcome is unknown
// (an error), the node may have granted one of them without a word, and
// the key's fair waiters in the locker's line are told so (payload "",
// as when a node's subscription was re-established), so that the first
// of them attempts, and an attempt takes over a grant it finds.
func (fairHeld) finishRelease(s scope, i int, p Pending) (bool, error) {
	g, ok := p.(GrantPending)
	if !ok {
		return p.Finish()
	}
	ok, grant, err := g.FinishGrant()
	if grant != "" || err != nil {
		s.cfg.lines.handGrant(s.key, i, grant)
	}
	return ok, err
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

// waitsForGrant reports whether a fair waiter lets backoff delay n, which
// ran out, pass without an attempt and waits on for delay n + 1, since
// the attempt could only be refused:
//   - its latest attempt was made while subscribed, to a quorum of the
//     nodes (an announcement of anything that happened since reaches
//     it), and found two entries or more ahead of it on a quorum of nodes.
//     It becomes the head there only when the entries ahead leave: by a
//     release, which grants the key to the next and announces it, by a
//     leave, which announces too, or by expiring. The waiter next in line
//     (one entry ahead, the holder's or a waiter's) attempts on every
//     delay as before, and so finds a key whose holder died and whose TTL
//     ran out (nobody announces that);
//   - its entry will still be on the nodes after the next delay: the
//     attempt that refreshes it then comes at the latest a node timeout
//     and fairMargin before the entry's stay runs out (an expired entry is
//     dropped, and the waiter would be queued anew by its next attempt);
//   - the strategy is Retry and grants another delay (its last attempt
//     is made; a custom Strategy is asked only when its time comes, so a
//     waiter with one attempts on every delay).
//
// So a waiter further back waits for its grant instead of asking the
// nodes every time its delay runs out: with 8 processes contending at 5
// nodes, those refused attempts were most of the nodes' and clients' work
// (BENCHMARKS.md), on a machine the hand-off shares with them; and it
// waits for the delays it lets pass on one timer (lettingPass), rather
// than waking at each one's end. The cost: when the entries ahead expire
// unannounced (their waiters died), it notices at its next refresh
// rather than at its next delay.
func (w *waiter) waitsForGrant(n int) bool {
	due, ok := w.grantDue()
	if !ok {
		return false
	}
	_, passes := nextPassed(w.cfg.strategy, n, w.cfg.clock.Now(), due)
	return passes
}

// nextPassed returns delay n + 1, and whether delay n, ending at end,
// is let pass: the strategy grants delay n + 1, and the attempt at its
// end still comes before due (grantDue). waitsForGrant asks it when a
// delay ended, lettingPass for each delay of a stretch ahead.
func nextPassed(s Strategy, n int, end, due time.Time) (time.Duration, bool) {
	next, ok := s.Backoff(n + 1)
	return next, ok && end.Add(next).Before(due)
}

// grantDue reports whether the waiter is a fair one whose latest attempt
// lets it wait for its grant (the first condition of waitsForGrant, and
// a Retry strategy), and the time by which its next attempt must come,
// to refresh its entry before the entry's stay runs out.
func (w *waiter) grantDue() (time.Time, bool) {
	f := w.fair()
	if f == nil || w.wake == nil || !w.wake.listening() || int(f.behind.Load()) < quorum(len(w.nodes)) {
		return time.Time{}, false
	}
	if _, ok := w.cfg.strategy.(retry); !ok { // a custom Strategy is not consulted ahead of its time
		return time.Time{}, false
	}
	return f.start.Add(f.stay - w.cfg.timeout() - fairMargin), true
}

// maxStretch bounds the backoff delays that one timer covers
// (lettingPass): with short delays of one length (a campaign's) and a
// long TTL, an entry would outlive thousands of them.
const maxStretch = 64

// lettingPass returns the last of the backoff delays retry, retry + 1, …
// that a waiter will have waited out, letting each before it pass
// (waitsForGrant), when delay retry ends at end; and when that delay
// ends. Nothing that waitsForGrant weighs changes without an attempt but
// the time, so its answer at each delay's end is known when the first
// begins; an attempt on a wake-up meanwhile ends the stretch (waitDelays).
func (w *waiter) lettingPass(retry int, end time.Time) (int, time.Time) {
	due, ok := w.grantDue()
	for n := 0; ok && n < maxStretch; n++ {
		next, passes := nextPassed(w.cfg.strategy, retry, end, due)
		if !passes {
			break
		}
		retry, end = retry+1, end.Add(next)
	}
	return retry, end
}

// subscribesFirst reports whether a fair Lock call subscribes to the
// key's announcements before its first attempt instead of after it: when
// a fair call of its locker found the key taken lately (markContended),
// hand-off is on and the strategy is Retry with delays. A default call
// that may join the queues (mayJoinQueues) does the same, and becomes
// fair for the whole call, when its locker's call that found the key
// taken lately was refused by another locker's lock: it queues from its
// first attempt. Across 8 processes at five nodes the default's
// hand-off then ran as fast as WithFairness's (BENCHMARKS.md).
//
// A fair call that attempts first and is refused subscribes, then makes
// a second attempt at once (waitOut): a release between the two was not
// announced to it. Subscribed first, its first attempt is the one made
// while subscribed: it queues the call, its token is the one a release
// grants (claim), and, two places or more behind, the waiter waits for
// its grant from the first delay on (waitsForGrant). So a contended call
// makes one attempt where it made two: one round per node less per
// acquisition, a third of the nodes' scripts when 8 processes contend
// (BENCHMARKS.md). An uncontended call still makes its attempt with no
// subscription, unless its locker found the key taken within the last
// TTL: then it pays one subscription it did not need, and finding the
// key free, leaves no news for the next call.
func (w *waiter) subscribesFirst() bool {
	if w.fair() != nil {
		return waitsForReleases(w.cfg) && w.cfg.lines.takeContended(w.key, w.cfg.clock.Now(), false)
	}
	if !w.mayJoinQueues() || !w.cfg.lines.takeContended(w.key, w.cfg.clock.Now(), true) {
		return false
	}
	w.what = newFairKey(w.cfg)
	return true
}

// queues reports whether the attempt under way is a fair call's first:
// it is made whatever the locker's line knows (heldHere), since it puts
// the call in the nodes' queues.
func (w *waiter) queues() bool {
	f := w.fair()
	return f != nil && f.attempt == 0
}

// joinQueues makes a plain Lock call fair for the rest of the call when
// a quorum of the nodes refused its latest attempt (a lock holds the key)
// while its locker held no lock of the key (lines.holds): the holder is
// then another locker's, and the call would otherwise race that locker's
// next call for the release (fair once contended, above). Its ticket's
// score is the time of the decision. A call already subscribed leaves its subscription and its
// line: the next wait subscribes it again as a fair waiter (to its
// locker's grants too), and attempts once subscribed. Not for calls
// WithoutFairness or WithFairness (fair from the start), WithFencing (a
// fair lock has no fencing token), sets, readers and writers, nor for
// calls that do not wait with hand-off on (waitsForReleases), nor over a
// node that is not a FairQueuer.
func (w *waiter) joinQueues() {
	if w.sent != w.attempts {
		return
	}
	if f := w.fair(); f != nil {
		// A default call that queued from its first attempt
		// (subscribesFirst) learns from it whether another locker's
		// lock refused it, which its record (markContended) says.
		if !w.cfg.fair && !w.byOther && f.attempt == 1 {
			w.byOther = w.refusedByOther()
		}
		return
	}
	if !w.mayJoinQueues() || !w.refusedByOther() {
		return
	}
	w.byOther = true
	if w.wake != nil {
		w.stopWatching()
		w.wake, w.watched, w.gate = nil, false, -1
	}
	w.what = newFairKey(w.cfg)
}

// refusedByOther reports whether a quorum of the nodes refused the
// latest attempt (a lock holds the key, not a split vote, leftovers or
// silent nodes) while no lock of the locker can have been on the nodes
// (w.ownMay, lines.busy): the holder is another locker's. Checking only
// that the locker holds none when the refusal is read was not enough: an
// attempt of another call of the locker may have taken the key and not
// yet recorded it, or a lock that refused the attempt may have been
// released since; a call refused so, taken for another locker's waiter,
// joined the queues and jumped its own locker's line (the hand-off
// benchmark in one process had such calls in most runs).
func (w *waiter) refusedByOther() bool {
	refused := 0
	for _, err := range w.last {
		if err == ErrNotAcquired {
			refused++
		}
	}
	return refused >= quorum(len(w.nodes)) && !w.ownMay
}

// mayJoinQueues reports whether a plain call may become fair
// (joinQueues, subscribesFirst): not WithoutFairness nor WithFairness
// (fair from the start), not WithFencing, a Lock of one key (not a set,
// a reader or a writer) that waits with hand-off on, over nodes that
// are all FairQueuers.
func (w *waiter) mayJoinQueues() bool {
	return !w.cfg.unfair && !w.cfg.fair && !w.cfg.fencing && w.what == target(oneKey{}) && w.keys == nil &&
		waitsForReleases(w.cfg) && lacking[FairQueuer](w.nodes) == nil
}

// markContended records, for a call queued in the nodes' queues whose
// first attempt did not take the lock, that the key is contended: for
// the next TTL, the locker's next fair call on it subscribes first; and,
// when another locker's lock refused the call (w.byOther), so does its
// next default call, which then queues from its first attempt
// (subscribesFirst).
func (w *waiter) markContended() {
	if w.waited && (w.cfg.fair || w.byOther) {
		w.cfg.lines.markContended(w.key, w.cfg.clock.Now(), w.cfg.ttl, w.byOther)
	}
}

// maxContended bounds the keys a locker remembers as contended; beyond
// it, expired records are dropped first, and a new one is not recorded
// while none has expired.
const maxContended = 256

func (ls *lines) markContended(key string, now time.Time, ttl time.Duration, byOther bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.contended == nil {
		ls.contended = map[string]contention{}
	}
	if _, ok := ls.contended[key]; !ok && len(ls.contended) >= maxContended {
		for k, c := range ls.contended {
			if !now.Before(c.until) {
				delete(ls.contended, k)
			}
		}
		if len(ls.contended) >= maxContended {
			return
		}
	}
	ls.contended[key] = contention{until: now.Add(ttl), byOther: byOther}
}

// takeContended reports whether key was recorded as contended and the
// record has not expired at now, and, with byOther, was left by a call
// that another locker's lock refused; and forgets a record it reports:
// the call that takes it records it again if it finds the key taken too.
func (ls *lines) takeContended(key string, now time.Time, byOther bool) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	c, ok := ls.contended[key]
	if !ok || byOther && !c.byOther {
		return false
	}
	delete(ls.contended, key)
	return now.Before(c.until)
}

// claimableLocked reports whether releases granted the fair waiter's
// latest attempt's token on a quorum of the nodes that refused that
// attempt (see claim).
func (w *wakeup) claimableLocked() bool {
	if w.grantTok == "" { // not a fair waiter, or no attempt since subscribing
		return false
	}
	n := 0
	for i, g := range w.granted {
		if g && w.trusted[i] {
			n++
		}
	}
	return n >= w.quorum
}

// claim returns the lock that releases granted to a fair waiter, when
// they did on a quorum and it is still valid; otherwise nil, and the
// waiter makes an attempt (which takes over the grants it finds).
//
// Why this is safe. A release grants the token that the head's latest
// attempt registered on that node (acquire_fair.lua), so on node i a
// grant of token came after that attempt ran there, which was after
// start, read before it was sent: the node keeps the key until start +
// TTL on its clock at the earliest, as for an acquisition at start
// (attempt.go). Only grants from nodes that refused the attempt count:
// on the others the attempt may have been rolled back with that very
// token, and the announcement of a grant made before the rollback can
// arrive after it. The token is the latest attempt's (a grant of an
// earlier one is taken over by the next attempt instead): no later
// attempt of ours can have replaced it, an earlier one delivered late
// does not take it over (AcquireFair's attempt numbers), and nobody
// else's script deletes or sets a key that holds it. So the lock is valid
// until start + TTL − drift, like one acquired by a round that began at
// start, and exclusion rests on the same quorum of keys.
func (w *waiter) claim() *Lock {
	f := w.fair()
	if f == nil || w.wake == nil {
		return nil
	}
	w.wake.mu.Lock()
	ok, token := w.wake.claimableLocked(), w.wake.grantTok
	w.wake.mu.Unlock()
	if !ok || validity(w.cfg.ttl, w.cfg.clock.Now().Sub(f.start), w.cfg.drift()) <= 0 {
		return nil
	}
	// Nothing to leave: the lock's release removes the entry on every
	// node, and deletes a grant that came to a node after the claim.
	w.last = make([]error, len(w.nodes))
	return w.grant(token, nil, f.start)
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
	if f == nil || f.attempt == 0 { // never entered the queues
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
	if b := lacking[FairQueuer](nodes); b != nil {
		return invalidf("WithFairness: node %q (%T) does not implement FairQueuer", b.Name(), b)
	}
	return nil
}
