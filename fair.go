package redlock

import (
	"context"
	"crypto/rand"
	"runtime"
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
// records the locks it holds, lines.held), the holder is another
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
// and take transfers (handoff.go). A locker remembers, for a
// TTL, that another locker's lock refused one of its calls that then
// waited (markContended): its next default call on the key queues from
// its first attempt, subscribed first (subscribesFirst), as a
// WithFairness call would, instead of a plain attempt that would be
// refused and a fair one after it; it pays the queue's script, and a
// subscription, even if it finds the key free. WithFairness queues a
// call from its first attempt (so it also orders calls that find the
// key free between a release and the head's attempt); WithFairness(false)
// never queues, the behaviour of plain Redlock clients.
//
// Each node keeps, per lock key, a queue of waiting Lock calls (a sorted
// set, key + ":queue", the entries' expiries, key + ":queue:exp", and
// their grants, key + ":queue:grant"; with Redis Cluster in the key's
// hash slot). An entry is a Lock call's ticket (random, drawn once per
// call) ordered by a score the client sends: the call's start, in
// microseconds of its wall clock, the same on every node and for every
// attempt of the call. A fair attempt (node.acquireFair,
// acquire_fair.lua) adds or refreshes the caller's entry, registers the attempt's
// token and TTL as the entry's grant, and sets the key, as SET NX does,
// only if the key is free and the entry is the queue's head (or the key
// holds the entry's earlier grant, see below); otherwise it refuses and
// reports how many entries are ahead.
//
// The release of a fair lock (node.releaseFair, release_fair.lua) hands the key on in
// the same step: having deleted it, it sets it to the head's registered
// token with the head's TTL (a grant) and announces "grant=" + the head's
// ticket + " " + that token. Only the head's waiter acts on it (notify.go:
// the others sleep on; to a waiter that is not fair a grant is no
// release at all), and it takes the lock without a round of its own when a quorum of
// its nodes granted its latest attempt's token (waiter.claim, below);
// otherwise its next attempt takes over each grant it finds (the key
// holds the entry's registered token: it is ours), with its own token.
// So a hand-off across processes costs one round, the release's, and the
// announcement's trip.
//
// A grant within the process. When the head is a waiter of the releasing
// Lock's own locker, the announcement would only travel from the node
// back to the process that sent the release. So the release script
// returns such a grant in its reply instead of announcing it, and the
// release hands it to its waiter as each node's reply comes in
// (fairHeld.release), as the announcement would have, then yields its
// processor to the waiter it woke (lines.handGrant). A waiter
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
// random spread before a woken attempt (gate.go), which exist
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
// (release_fair.lua), and it expires no later than the key itself would. A
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
// Calls WithFairness(false) (and plain Redlock clients of other
// libraries) use plain SET NX, ignore the queue and can barge in ahead of
// it, but seldom find the key free while fair waiters are queued. Nodes
// whose driver.Info has ReplicaAck do not grant (a grant, set by the
// releaser's script, is waited for by no replica acknowledgement): their
// releases only name the head, which acquires itself. Fair locks are
// never transferred within a locker (handoff.go): the queue, not the
// locker's line, names the next holder; and a plain lock is not
// transferred while the queue has an entry (errWaitersQueued): its Unlock
// releases to the head. The queues serve Lock and Do; a fenced call
// queues only WithFairness(true), and an election's campaigns
// (WithFairness(false)), sets (LockMany), readers and writers, and
// semaphores ignore them.

// WithFairness(true) makes Lock and Do calls take a free key in the order
// the calls started, across every locker (process) that uses the key:
// each call joins the key's queue on the nodes from its first attempt
// (see the notes above). WithFairness(false) makes calls never join the
// queues: every attempt is a plain SET NX, and a free key goes to whichever
// attempt reaches it first, as with plain Redlock clients. Without either,
// a call joins the queues once another locker's lock refused it (fair once
// contended). Fairness is for calls that wait (Retry) with hand-off on. It
// combines with WithFencing: a fair call's fencing token is issued by the
// attempt that takes the key.
func WithFairness(on bool) Option { return func(c *config) { c.fair, c.unfair = on, !on } }

// fairMargin pads an entry's stay beyond the next attempt's expected
// time, for scheduling delays.
const fairMargin = 10 * time.Millisecond

// fairKey is the mutex on s.key taken through the queue: oneKey whose
// acquire is node.acquireFair with the Lock call's ticket. Unlike oneKey it
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

func (f *fairKey) acquire(ctx context.Context, s scope, n *node, token string) (bool, error) {
	return f.counted(n.acquireFair(ctx, s.key, token, f.sent(s.cfg, 0)))
}

// acquireFenced is a fenced call's fair attempt: granted, the node issues
// the next fencing token in the same step.
func (f *fairKey) acquireFenced(ctx context.Context, s scope, n *node, token string, fences []int64) (bool, error) {
	ok, v, err := n.acquireFair(ctx, s.key, token, f.sent(s.cfg, s.cfg.fenceLife))
	if ok {
		fences[0] = v
		return true, nil
	}
	return f.counted(ok, v, err)
}

// sent is what the latest attempt sends, with a fence counter's life for
// a fenced call.
func (f *fairKey) sent(cfg *config, life time.Duration) fairAttempt {
	return fairAttempt{ttl: cfg.ttl, ticket: f.ticket, score: f.score, stay: f.stay, attempt: f.attempt, life: life}
}

// counted returns a node's answer to an attempt, counting the node in
// behind if it found two entries or more ahead.
func (f *fairKey) counted(ok bool, ahead int64, err error) (bool, error) {
	if err == nil && !ok && ahead > 1 {
		f.behind.Add(1)
	}
	return ok, err
}

// notify subscribes a fair waiter to the key's releases and to its
// locker's grant channel, where a fair release addresses the grant, in
// one subscription.
func (f *fairKey) notify(ctx context.Context, s scope, n *node, released func(string)) (func(), error) {
	return n.notify(ctx, []string{s.key}, s.cfg.lines.id, released)
}

// fairHeld is the target of a lock taken through the queue: its release
// also removes the Lock call's queue entry (release_fair.lua). The
// waiter's rollbacks use fairKey's, plain release, which keeps the entry.
type fairHeld struct {
	oneKey
	ticket string
}

// release releases the fair lock and hands the key on to the queue's
// head. A grant to a waiter of this locker comes back in the node's reply
// instead of being announced, and goes to that waiter as its announcement
// would have (a grant within the process, above). When the release's
// outcome is unknown (an error), the node may have granted one of them
// without a word, and the key's fair waiters in the locker's line are
// told so (payload "", as when a subscription was re-established): the
// first of them attempts, and an attempt takes over a grant it finds.
func (f fairHeld) release(ctx context.Context, s scope, n *node, token string, announce bool) (bool, error) {
	ok, grant, err := n.releaseFair(ctx, s.key, token, f.ticket, announce, announce)
	if grant != "" || err != nil {
		s.cfg.lines.handGrant(s.key, n.index, grant)
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
		if d, ok := cfg.strategy.Backoff(0); ok {
			next = d
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
// nodes, those refused attempts are most of the nodes' and clients' work,
// on a machine the hand-off shares with them; and it
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
// first attempt, so that across processes the default's hand-off runs as
// fast as WithFairness's.
//
// A fair call that attempts first and is refused subscribes, then makes
// a second attempt at once (waitOut): a release between the two was not
// announced to it. Subscribed first, its first attempt is the one made
// while subscribed: it queues the call, its token is the one a release
// grants (claim), and, two places or more behind, the waiter waits for
// its grant from the first delay on (waitsForGrant). So a contended call
// makes one attempt where it would make two: one round per node less per
// acquisition. An uncontended call still makes its attempt with no
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
// while its locker held no lock of the key (lines.own): the holder is
// then another locker's, and the call would otherwise race that locker's
// next call for the release (fair once contended, above). Its ticket's
// score is the time of the decision. A call already subscribed leaves its subscription and its
// line: the next wait subscribes it again as a fair waiter (to its
// locker's grants too), and attempts once subscribed. Not for calls
// WithFairness(false) or WithFairness(true) (fair from the start),
// WithFencing, sets, readers and writers, nor for calls that do not wait
// with hand-off on (waitsForReleases), nor over a node that cannot
// deliver announcements (everyNodeNotifies).
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
// (w.ownMay, lines.busy): the holder is another locker's. What the
// locker holds when the refusal is read is not enough: an attempt of
// another call of the locker may have taken the key and not yet recorded
// it, or a lock that refused the attempt may have been released since; a
// call refused so, taken for another locker's waiter, would join the
// queues and jump its own locker's line.
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
// (joinQueues, subscribesFirst): not WithFairness(false) nor
// WithFairness(true) (fair from the start), not WithFencing, a Lock of
// one key (not a set, a reader or a writer) that waits with hand-off on,
// over nodes that all deliver announcements.
func (w *waiter) mayJoinQueues() bool {
	return !w.cfg.unfair && !w.cfg.fair && !w.cfg.fencing && w.what == target(oneKey{}) && w.keys == nil &&
		waitsForReleases(w.cfg) && everyNodeNotifies(w.nodes)
}

// everyNodeNotifies reports whether every node delivers announcements: a
// call joins the queues by default only then, since a release grants the
// key to the queue's head, and a head that cannot hear it takes the key
// only at its next attempt.
func everyNodeNotifies(nodes []*node) bool {
	for _, n := range nodes {
		if n.sub == nil {
			return false
		}
	}
	return true
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

// handGrant gives node i's announcement payload, a grant one of this
// locker's releases made without announcing it (fair.go,
// fairHeld.release), to the fair waiter of key it names; payload ""
// to every fair waiter of key in line. Each takes it as it would the announcement (released),
// outside the locker's lock. Having woken one, the calling goroutine
// yields its processor (runtime.Gosched), as sync.Mutex's Unlock does
// for the waiter it hands the mutex to when starving: the woken waiter
// takes the lock at once instead of after the releasing goroutine's next
// blocking call, and the key is held by nobody the shorter.
func (ls *lines) handGrant(key string, i int, payload string) {
	_, ticket, _ := splitAnnouncement(payload)
	ls.mu.Lock()
	var to []*wakeup
	if l := ls.m[key]; l != nil {
		for _, w := range l.waiters {
			if w.ticket != "" && (payload == "" || w.ticket == ticket) {
				to = append(to, w)
			}
		}
	}
	ls.mu.Unlock()
	woke := false
	for _, w := range to {
		woke = w.released(i, payload) || woke
	}
	if woke {
		runtime.Gosched()
	}
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
// does not take it over (acquire_fair.lua's attempt numbers), and nobody
// else's script deletes or sets a key that holds it. So the lock is valid
// until start + TTL − drift, like one acquired by a round that began at
// start, and exclusion rests on the same quorum of keys.
func (w *waiter) claim() *Lock {
	f := w.fair()
	if f == nil || w.wake == nil || w.cfg.fencing {
		// A fenced call's token is issued by its own attempt, which
		// takes the grants over (acquire_fair.lua).
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
		func(ctx context.Context, _ int, n *node) (bool, error) {
			_, _, err := n.releaseFair(ctx, key, "", ticket, true, false)
			return true, err
		})
}
