package redlock

import (
	"context"
	"errors"
	"github.com/quorumlock/redlock/driver"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// woke reports whether w has a wake-up pending, and spends it.
func woke(w *wakeup) bool {
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
}

// soleWaiter is a wakeup for 5 subscribed nodes, first in its own line.
func soleWaiter(t *testing.T) *wakeup {
	w := newWakeup(5, &lines{})
	w.subscribed([]bool{true, true, true, true, true}, quorum(5))
	w.lines.join(t.Name(), w)
	t.Cleanup(w.leave)
	return w
}

var refusedEverywhere = []error{ErrNotAcquired, ErrNotAcquired, ErrNotAcquired, ErrNotAcquired, ErrNotAcquired}

// TestWakeupWaitsForTheGate is finding 4: a quorum of announcements woke
// the waiter while the gate had not yet released; the gate refused, and
// the rest of the release (two announcements) never made a new quorum, so
// the waiter slept through it.
func TestWakeupWaitsForTheGate(t *testing.T) {
	w := soleWaiter(t)
	w.gateOn(4)
	w.begin("mine")
	w.end(refusedEverywhere)
	for i := range 3 {
		w.released(i, "holder")
	}
	assert.False(t, woke(w), "a quorum released, but not yet the gate")
	w.released(4, "holder")
	assert.True(t, woke(w), "the gate released too")
}

// TestWakeupKeepsAReleaseSpreadOverAnAttempt shows announcements that
// arrive during an attempt counted when it ends: a release that the
// attempt caught only in part still wakes the waiter once enough nodes
// announced it.
func TestWakeupKeepsAReleaseSpreadOverAnAttempt(t *testing.T) {
	w := soleWaiter(t)
	w.begin("a")
	w.end(refusedEverywhere)
	w.released(0, "holder")
	w.released(1, "holder")
	assert.False(t, woke(w))
	w.begin("b")
	w.released(2, "holder") // during the attempt, which node 2 still refused
	w.end([]error{nil, nil, ErrNotAcquired, ErrNotAcquired, ErrNotAcquired})
	assert.True(t, woke(w), "nodes 0, 1 and 2 are free: a quorum")
}

// TestWakeupIgnoresOwnRollbacks is finding 9 at the unit level.
func TestWakeupIgnoresOwnRollbacks(t *testing.T) {
	w := soleWaiter(t)
	w.begin("mine")
	w.end([]error{nil, nil, ErrNotAcquired, ErrNotAcquired, ErrNotAcquired})
	for i := range 2 {
		w.released(i, "mine") // our rollback
	}
	assert.False(t, woke(w), "our own rollback")
	w.begin("again")
	w.end([]error{nil, nil, nil, nil, nil}) // granted everywhere, then rolled back: validity ran out
	assert.False(t, woke(w), "an attempt's own outcome never wakes")
	w.released(2, "")
	assert.True(t, woke(w), "a possibly missed release (a reconnect) does")
}

// TestWakeupStartsFromTheAttemptBeforeSubscribing: a waiter refused
// everywhere before it subscribed waits for a quorum of announcements, not
// the first one.
func TestWakeupStartsFromTheAttemptBeforeSubscribing(t *testing.T) {
	w := soleWaiter(t)
	w.record(refusedEverywhere)
	w.released(0, "holder")
	w.released(1, "holder")
	assert.False(t, woke(w), "two of five nodes released")
	w.released(2, "holder")
	assert.True(t, woke(w), "a quorum released")
}

// fairWaiter is soleWaiter for a fair Lock call with ticket "T", second
// in its locker's line (the queue, not the line, orders fair waiters).
func fairWaiter(t *testing.T) *wakeup {
	ls := &lines{}
	ahead := newWakeup(5, ls)
	ls.join(t.Name(), ahead)
	t.Cleanup(ahead.leave)
	w := newWakeup(5, ls)
	w.ticket, w.granted, w.trusted = "T", make([]bool, 5), make([]bool, 5)
	w.subscribed([]bool{true, true, true, true, true}, quorum(5))
	ls.join(t.Name(), w)
	t.Cleanup(w.leave)
	return w
}

// A fair waiter sleeps through releases that name another waiter as the
// queue's head, and a waiter that is not fair through grants (the key is
// held by the grantee).
func TestWakeupFairNamedOnly(t *testing.T) {
	w := fairWaiter(t)
	w.begin("a")
	w.end(refusedEverywhere)
	for i := range 5 {
		w.released(i, "next=U holder")
		w.released(i, "grant=U utoken")
	}
	assert.False(t, w.claimableLocked() || woke(w), "the releases named another waiter")
	for i := range 3 {
		w.released(i, "next=T holder")
	}
	assert.True(t, woke(w), "named on a quorum: woken though second in line")
	assert.False(t, w.claimableLocked(), "named, not granted")

	plain := soleWaiter(t)
	plain.begin("b")
	plain.end(refusedEverywhere)
	for i := range 5 {
		plain.released(i, "grant=U utoken")
	}
	assert.False(t, woke(plain), "a grant to someone else leaves the key held")
}

// A fair waiter may claim a grant of its latest attempt's token only from
// a quorum of nodes that refused that attempt: a node that granted it (and
// was rolled back with that token) or did not answer may announce a grant
// that the rollback has since undone; and a grant of an earlier attempt's
// token counts for nothing.
func TestWakeupFairClaimsTrustedGrantsOnly(t *testing.T) {
	w := fairWaiter(t)
	w.begin("t1")
	w.end([]error{nil, errors.New("timeout"), ErrNotAcquired, ErrNotAcquired, ErrNotAcquired})
	w.released(0, "grant=T t1")
	w.released(1, "grant=T t1")
	w.released(2, "grant=T t1")
	assert.False(t, w.claimableLocked(), "nodes 0 and 1 did not refuse t1's attempt")
	w.released(3, "grant=T t1")
	assert.False(t, w.claimableLocked(), "two trusted grants of five nodes")
	w.released(4, "grant=T t1")
	assert.True(t, w.claimableLocked(), "nodes 2, 3 and 4 refused t1's attempt, then granted t1")
	assert.True(t, woke(w))

	w.begin("t2") // the next attempt takes over any grant of t1 it finds
	assert.False(t, w.claimableLocked(), "t1 is no longer the latest attempt's token")
	for i := range 5 {
		w.released(i, "grant=T t1")
	}
	w.end(refusedEverywhere)
	assert.False(t, w.claimableLocked(), "grants of t1, announced late")
	for i := range 3 {
		w.released(i, "grant=T t2")
	}
	assert.True(t, w.claimableLocked())
}

// A locker remembers a contended key for one TTL, once (the next call
// takes the record), and at most maxContended keys: expired records make
// room, live ones are not evicted.
func TestContendedRecords(t *testing.T) {
	ls := newLines()
	now := time.Unix(1000, 0)
	ls.markContended("a", now, time.Second, false)
	assert.False(t, ls.takeContended("a", now.Add(time.Second), false), "expired after the TTL")
	assert.False(t, ls.takeContended("a", now, false), "taken (and dropped) by the call before")
	ls.markContended("a", now, time.Second, false)
	assert.True(t, ls.takeContended("a", now.Add(time.Second-1), false))
	assert.False(t, ls.takeContended("a", now, false), "one call takes it")

	for i := range maxContended {
		ls.markContended(strconv.Itoa(i), now, time.Second, false)
	}
	ls.markContended("full", now, time.Second, false)
	assert.NotContains(t, ls.contended, "full", "no room while every record is live")
	assert.Len(t, ls.contended, maxContended, "a live record is not evicted")
	ls.markContended("full", now.Add(time.Second), time.Second, false) // the others expired: room again
	assert.Len(t, ls.contended, 1, "the expired records were dropped")
	assert.True(t, ls.takeContended("full", now.Add(time.Second), false))

	// A default call takes only a record that another locker's lock
	// left; a WithFairness call takes either.
	ls.markContended("own", now, time.Second, false)
	assert.False(t, ls.takeContended("own", now, true), "left by a refusal of the locker's own")
	assert.True(t, ls.takeContended("own", now, false), "and still there for a WithFairness call")
	ls.markContended("other", now, time.Second, true)
	assert.True(t, ls.takeContended("other", now, true))
	ls.markContended("other", now, time.Second, true)
	assert.True(t, ls.takeContended("other", now, false))
}

// A locker's record of its own locks (lines.held, extended, unheld,
// holdsLocked): a lock counts until its Unlock or its validity's end, which
// its Extend moves; an older token's Unlock or Extend leaves a newer
// lock's record alone; and ended records are dropped once there are
// minSweep of them, live ones never.
func TestOwnLockRecords(t *testing.T) {
	ls := newLines()
	now := time.Unix(1000, 0)
	take := func(key, token string, at time.Time) {
		ls.held(key, ownLock{token: token, acquired: at, until: at.Add(time.Second)}, false)
	}
	take("a", "t1", now)
	assert.True(t, ls.holdsLocked("a", now))
	assert.False(t, ls.holdsLocked("a", now.Add(time.Second)), "ended with its validity")
	assert.False(t, ls.holdsLocked("b", now))
	take("a", "t2", now) // taken again (the first expired)
	ls.unheld("a", "t1")
	assert.True(t, ls.holdsLocked("a", now), "an older token's Unlock leaves the newer lock")
	ls.extended("a", "t1", now.Add(time.Hour))
	assert.False(t, ls.holdsLocked("a", now.Add(time.Second)), "an older token's Extend moves nothing")
	ls.extended("a", "t2", now.Add(time.Hour))
	assert.True(t, ls.holdsLocked("a", now.Add(time.Second)), "moved by its Extend")
	ls.unheld("a", "t2")
	assert.False(t, ls.holdsLocked("a", now), "gone with its Unlock")

	for i := range minSweep {
		take(strconv.Itoa(i), "t", now)
	}
	take("live", "t", now) // a sweep that finds every record live
	assert.Equal(t, minSweep+1, len(ls.own), "live records are kept")
	assert.Equal(t, 2*minSweep, ls.sweepAt, "the next sweep waits for twice as many")
	for i := minSweep + 1; i < 2*minSweep; i++ {
		take(strconv.Itoa(i), "t", now)
	}
	take("later", "t", now.Add(time.Second)) // the others ended
	assert.Equal(t, 1, len(ls.own), "ended records dropped at the sweep")
	assert.Equal(t, minSweep, ls.sweepAt)
	assert.True(t, ls.holdsLocked("later", now.Add(time.Second)))

	// A round in flight may leave a lock the records do not show.
	mine, mark := ls.beginRound("busy", now)
	assert.False(t, mine, "nothing held, nothing in flight")
	assert.False(t, ls.endRound("busy", now, mark), "no other round, no lock, during ours")
	mine, mark = ls.beginRound("busy", now)
	assert.False(t, mine)
	other, otherMark := ls.beginRound("busy", now)
	assert.True(t, other, "a round already in flight")
	assert.True(t, ls.endRound("busy", now, otherMark), "the first round still in flight")
	assert.True(t, ls.endRound("busy", now, mark), "another round began during ours")
	_, mark = ls.beginRound("busy", now)
	take("busy", "t", now)
	ls.unheld("busy", "t")
	assert.True(t, ls.endRound("busy", now, mark), "a lock was taken, and let go, during ours")
	assert.Empty(t, ls.busy, "no record is kept for a key with no round in flight")
}

// A release of a lock that the line held (Unlock, lines.yield) moves the
// line from "held here" to "yielding to the first waiter" in one step:
// the others' timers see one or the other at every moment. With the two
// done apart, a timer firing between them found neither and took the
// key out of turn (TestReleaseKeepsTheLineInOrder failed within five
// runs with a 2 ms pause put between them).
func TestYieldTakesOverFromTheHolder(t *testing.T) {
	ls := newLines()
	first, second := newWakeup(1, ls), newWakeup(1, ls)
	ls.join("k", first)
	ls.join("k", second)
	defer first.leave()
	defer second.leave()
	now := time.Unix(1000, 0)
	ls.held("k", ownLock{token: "t", acquired: now, until: now.Add(time.Second)}, true)
	assert.True(t, now.Before(ls.heldUntil("k")), "held by the line")
	assert.False(t, ls.yieldingTo("k", second, now))

	ls.yield("k", "other", now.Add(time.Second)) // another token's: the lock stays
	assert.True(t, now.Before(ls.heldUntil("k")))
	ls.yield("k", "t", now.Add(time.Second))
	assert.False(t, now.Before(ls.heldUntil("k")), "the line no longer holds it")
	assert.False(t, ls.holdsLocked("k", now), "nor does the locker")
	assert.True(t, ls.yieldingTo("k", second, now), "the second waits for the first")
	assert.False(t, ls.yieldingTo("k", first, now), "the first attempts")
	assert.False(t, ls.yieldingTo("k", second, now.Add(time.Second)), "until the yield ends")
}

// A grant that a release of this locker returned instead of announcing
// it (GrantPending) reaches the fair waiter it names through handGrant,
// as its announcement would have: on a quorum of the nodes that refused
// the waiter's latest attempt, the waiter may claim it. Other waiters of
// the line hear nothing of it. An unknown outcome ("") tells every fair
// waiter of the key that the node may have released.
func TestHandGrantReachesTheNamedWaiter(t *testing.T) {
	w := fairWaiter(t) // ticket "T", second in its line
	ls, key := w.lines, t.Name()
	other := newWakeup(5, ls)
	other.ticket, other.granted, other.trusted = "U", make([]bool, 5), make([]bool, 5)
	other.subscribed([]bool{true, true, true, true, true}, quorum(5))
	ls.join(key, other)
	t.Cleanup(other.leave)
	for _, v := range []*wakeup{w, other} {
		v.begin("tok-" + v.ticket)
		v.end(refusedEverywhere)
	}

	ls.handGrant(key, 0, "grant=T tok-T")
	ls.handGrant(key, 1, "grant=T tok-T")
	assert.False(t, w.claimableLocked() || woke(w), "granted on two nodes of five")
	ls.handGrant("another key", 2, "grant=T tok-T")
	assert.False(t, w.claimableLocked() || woke(w), "a grant of another key")
	ls.handGrant(key, 2, "grant=T tok-T")
	assert.True(t, w.claimableLocked(), "granted on a quorum of the nodes that refused")
	assert.True(t, woke(w), "named: woken though second in line")
	assert.False(t, other.claimableLocked() || woke(other), "the grants named another waiter")

	ls.handGrant(key, 3, "")
	assert.False(t, other.held[3], "an unknown outcome frees the node for every fair waiter")
	assert.False(t, w.held[3])
	assert.False(t, woke(other), "one node of five is no quorum")
}

// replyNode answers every script with reply, or err.
type replyNode struct {
	reply any
	err   error
}

func (replyNode) Info() driver.Info { return driver.Info{Name: "reply"} }
func (r replyNode) Eval(context.Context, *driver.Script, []string, ...string) (any, error) {
	return r.reply, r.err
}

// A fair lock's release hands a grant the node returned to the waiter it
// names (fairHeld.release), and, when the node's answer is an error (the
// release may have granted unheard), tells the key's fair waiters that
// the node may have released.
func TestFairReleaseHandsTheGrantOver(t *testing.T) {
	w := fairWaiter(t) // ticket "T"
	s := scope{key: t.Name(), cfg: &config{lines: w.lines}}
	w.begin("tok-T")
	w.end(refusedEverywhere)

	for i := range 3 {
		n := &node{Node: replyNode{reply: "grant=T tok-T"}, index: i}
		ok, err := fairHeld{}.release(t.Context(), s, n, "tok-old", true)
		assert.True(t, ok)
		assert.NoError(t, err)
	}
	assert.True(t, w.claimableLocked(), "granted on a quorum")
	assert.True(t, woke(w))

	lost := errors.New("node timeout")
	ok, err := fairHeld{}.release(t.Context(), s, &node{Node: replyNode{err: lost}, index: 3}, "tok-old", true)
	assert.False(t, ok)
	assert.ErrorIs(t, err, lost)
	assert.False(t, w.held[3], "an unknown outcome frees the node")
}
