package redlock

import (
	"crypto/rand"
	"sync"
	"time"
)

// A line is one locker's waiters for one key, in order of arrival. A
// release wakes only the first of them: the others would only lose the
// race to it (or to each other), each failed attempt costing a round to
// every node and a rollback that wakes everyone again. Waking one per
// locker keeps the herd as small as the number of lockers waiting (usually
// one per process: build one Locker and share it), and makes waiters of
// one locker take turns in arrival order: a call joins the line when it
// begins to wait, before its subscription answers (watchReleases), so
// that a later call subscribed sooner does not pass it. A transfer
// (handoff.go) does without the release: Unlock hands the key to the
// first waiter. The others still attempt when their backoff
// delays run out, so a slow first waiter delays them by at most their
// delay; except while a lock that a waiter of their line took is valid
// and not unlocked (heldUntil), when the nodes would only refuse them,
// and while the first waiter takes a key this locker released (yield),
// when they would only take it out of turn.
type line struct {
	key     string
	waiters []*wakeup

	// A lock of this locker that one of the line's waiters took, until
	// its Unlock: its token and validity. While it is valid the others
	// know the key is held without asking the nodes (see heldUntil).
	holder string
	until  time.Time

	// yieldUntil: a lock of this locker was just released (not
	// transferred) while the line waited, and the release's announcement
	// wakes the first waiter; until its attempt ends (or this time
	// passes), the others leave their timers' attempts out (yieldingTo).
	yieldFrom, yieldUntil time.Time
}

// lines holds one locker's lines that have waiters; a line is dropped
// with its last waiter. Copies of a config share it.
type lines struct {
	// id names the locker to the nodes: its fair Lock calls' tickets
	// begin with it, and the grants a release addresses to them are
	// announced on the locker's own channel (fair.go). Random, fixed.
	id string
	mu sync.Mutex
	m  map[string]*line
	// contended: keys for which a Lock call of the locker found the key
	// taken while queued, until when that is news, and whether another
	// locker's lock refused it (fair.go, subscribesFirst).
	contended map[string]contention
	// own: the lock of one key this locker holds, by key, whether or not
	// anyone was in line for it, until its Unlock or the end of its
	// validity: a call refused while one is held (or a round is busy,
	// below) may have been refused by its own locker (fair.go,
	// joinQueues). sweepAt: the size at which ended
	// records are dropped.
	own     map[string]ownLock
	sweepAt int
	// busy: by key, the locker's rounds in flight that may leave a lock
	// of its own on the nodes that own does not show: an attempt, from
	// before it is sent until a lock it took is in own; a release or a
	// transfer, from before its lock leaves own until the round is over.
	// A call refused by a quorum was refused by another locker's lock
	// only if no lock of its own locker was on the nodes during its
	// attempt: none in own, and no other round busy, when the attempt
	// began, when it ended, or in between (busyKey.began).
	busy map[string]busyKey
	// released: by key, the token of the last lock of the key, taken by a
	// call that waited (Lock.watched), that the locker released on every
	// node (Unlock's round over, each node answered). A waiter that
	// starts after it ignores that release's announcements (notify.go,
	// watchReleases): its own attempts, made once it is subscribed, see
	// the key as the release left it, and a subscription that lingers
	// between waits (goredis) can deliver the announcement after the
	// waiter began. A hint: emptied when it reaches maxReleased keys.
	released map[string]string
}

// contention is a locker's record of a contended key (fair.go,
// markContended): until when it is news, and whether another locker's
// lock refused the call that left it.
type contention struct {
	until   time.Time
	byOther bool
}

// maxReleased bounds lines.released.
const maxReleased = 256

// ownLock is a lock of the locker's that own records: its token, when
// it was taken, and its validity (moved by Extend).
type ownLock struct {
	token           string
	acquired, until time.Time
}

// minSweep is the fewest records own holds before dropping ended ones.
const minSweep = 1024

// newLines returns a locker's empty lines, with an id of its own.
func newLines() *lines { return &lines{id: rand.Text()[:lockerIDLen]} }

// lockerIDLen is the length of a locker's id: 50 random bits.
const lockerIDLen = 10

// waiting reports whether the locker has waiters in line for key. A new
// Lock call then stands in line behind them instead of barging in with an attempt
// of its own (see waiter.run): a worker that just released the key would
// otherwise often take it straight back from the waiter its release woke,
// and the line would not be a line.
func (ls *lines) waiting(key string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.m[key] != nil
}

// held records that the locker took lock (own), and, for a plain lock
// taken in line (inLine), that its line holds it. A fair lock is not
// the line's holder: its waiters' attempts keep their queue entries
// alive (fair.go) and must not be left out.
func (ls *lines) held(key string, lock ownLock, inLine bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[key]; l != nil && inLine {
		l.holder, l.until = lock.token, lock.until
	}
	if ls.own == nil {
		ls.own, ls.sweepAt = map[string]ownLock{}, minSweep
	}
	if _, ok := ls.own[key]; !ok && len(ls.own) >= ls.sweepAt {
		for k, o := range ls.own { // ended before lock was taken
			if !lock.acquired.Before(o.until) {
				delete(ls.own, k)
			}
		}
		ls.sweepAt = max(minSweep, 2*len(ls.own))
	}
	ls.own[key] = lock
	if b, ok := ls.busy[key]; ok { // a round in flight ends after this (endRound)
		b.began++
		ls.busy[key] = b
	}
}

// unheld forgets the lock recorded for key if it is token's (Unlock).
func (ls *lines) unheld(key, token string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.unheldLocked(key, token)
}

// unheldLocked is unheld with ls.mu held.
func (ls *lines) unheldLocked(key, token string) {
	if l := ls.m[key]; l != nil && l.holder == token {
		l.holder, l.until = "", time.Time{}
	}
	if o, ok := ls.own[key]; ok && o.token == token {
		delete(ls.own, key)
	}
}

// releasedAll records that the lock of key with token was released on
// every node (lines.released).
func (ls *lines) releasedAll(key, token string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.released == nil || len(ls.released) >= maxReleased {
		ls.released = map[string]string{}
	}
	ls.released[key] = token
}

// lastReleased returns the token releasedAll last recorded for key, ""
// if none.
func (ls *lines) lastReleased(key string) string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.released[key]
}

// extended moves the validity recorded for the lock of key with token,
// if it is recorded (held), to until (Extend).
func (ls *lines) extended(key, token string, until time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[key]; l != nil && l.holder == token {
		l.until = until
	}
	if o, ok := ls.own[key]; ok && o.token == token {
		o.until = until
		ls.own[key] = o
	}
}

// busyKey is the locker's rounds in flight on one key (lines.busy), and
// how many began, or recorded a lock (held), while any was in flight.
type busyKey struct {
	rounds int
	began  uint64
}

// beginRound counts a round on key as begun (see busy). It reports
// whether a lock of the locker may be on the nodes at now (the locker
// holds one, valid at now, or another round is in flight), and a mark
// for endRound.
func (ls *lines) beginRound(key string, now time.Time) (mine bool, mark uint64) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.busy == nil {
		ls.busy = map[string]busyKey{}
	}
	b := ls.busy[key]
	mine = ls.holdsLocked(key, now) || b.rounds > 0
	b.rounds++
	b.began++
	ls.busy[key] = b
	return mine, b.began
}

// endRound counts a round that beginRound began, with mark, as over. It
// reports whether a lock of the locker may have been on the nodes since:
// another round began, or a lock was recorded, after this one began, or
// the locker holds one valid at now, or another round is in flight.
func (ls *lines) endRound(key string, now time.Time, mark uint64) (mine bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	b := ls.busy[key]
	mine = b.began != mark || b.rounds > 1 || ls.holdsLocked(key, now)
	if b.rounds--; b.rounds > 0 {
		ls.busy[key] = b
	} else {
		delete(ls.busy, key)
	}
	return mine
}

// holdsLocked reports whether the locker holds a lock of key that it
// took (held) and has not unlocked, valid at now; ls.mu held.
func (ls *lines) holdsLocked(key string, now time.Time) bool {
	o, ok := ls.own[key]
	return ok && now.Before(o.until)
}

// heldUntil returns the validity of the lock of this locker that a
// waiter in line for key took and has not unlocked; the zero time when
// there is none. A waiter whose backoff delay runs out before it need not
// ask the nodes: they would refuse. It cannot be lost sooner without the
// locker's knowing, short of a node losing its data, and then the waiters
// ask again once it runs out.
func (ls *lines) heldUntil(key string) time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[key]; l != nil {
		return l.until
	}
	return time.Time{}
}

// yield records that a lock of this locker on key is being released
// while waiters are in line for it, until at the latest: the line's
// first waiter is about to be woken by the release. Without it, the
// others' timers, which fire at any moment, take the free key more often
// than not ahead of the woken waiter, whose attempt waits for the
// announcement (and, with several nodes, for the gate's answer first):
// the line would not be a line. The other lockers' waiters are not held
// back; only this locker's own order is kept.
//
// The yield begins before the release round, and only an attempt that
// began after that round ended (yieldFrom, set by releasedAt) ends it:
// one that began earlier may have reached the nodes before the release.
// It forgets the released lock, the one of key with token (as unheld
// does), in the same step: a waiter's timer between the two would find
// the key neither held here (heldUntil) nor yielded, and attempt out of
// turn while the release reaches the nodes.
func (ls *lines) yield(key, token string, until time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[key]; l != nil {
		l.yieldFrom, l.yieldUntil = until, until
	}
	ls.unheldLocked(key, token)
}

// releasedAt records that the release round of a yield ended at t.
func (ls *lines) releasedAt(key string, t time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[key]; l != nil && t.Before(l.yieldUntil) {
		l.yieldFrom = t
	}
}

// yieldingTo reports whether w, waiting in line for key, should leave
// its timer's attempt out at now: a release of this locker is being
// taken by the line's first waiter, which w is not.
func (ls *lines) yieldingTo(key string, w *wakeup, now time.Time) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[key]
	return l != nil && now.Before(l.yieldUntil) && l.waiters[0] != w
}

// yielded ends the yield of key's line when its first waiter's attempt
// that began at start, after the release round ended, ended (whatever
// its outcome: the other lockers' waiters may have won). An attempt that
// began before, on its timer, proves nothing: the release may not have
// reached the nodes yet.
func (ls *lines) yielded(key string, w *wakeup, start time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l := ls.m[key]; l != nil && l.waiters[0] == w && !start.Before(l.yieldFrom) {
		l.yieldUntil = time.Time{}
	}
}

// join puts w, one of ls's waiters, at the end of the line for key.
func (ls *lines) join(key string, w *wakeup) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[string]*line{}
	}
	l := ls.m[key]
	if l == nil {
		l = &line{key: key}
		ls.m[key] = l
	}
	l.waiters = append(l.waiters, w)
	w.line = l
}
