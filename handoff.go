package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Hand-off within a locker: Unlock gives the key to the next waiter.
//
// Without it, a hand-off between two goroutines of one process costs a
// release round, the release's announcement travelling back from the
// nodes (notify.go), the waiter waking, and its acquire round: two round
// trips and a wake-up, with the key free in between for anyone's timer
// to grab out of turn. When the locker's first waiter in line for the
// key (line.go) waits for a plain Lock of it, Unlock instead runs one
// transfer round: on each node,
// transfer.lua swaps our token for a fresh one of the waiter's, with the
// waiter's TTL, only if the key still holds ours. The waiter wakes with
// the lock in hand: one round trip, and the key never free.
//
// Validity. The new lock is valid until start + TTL − drift, where start
// is read before the transfer round is sent, and only if a quorum
// transferred and the round ended before that: each node that transferred
// set the key with a TTL at some moment after start, so it keeps the
// waiter's token until start + TTL on its clock at the earliest, as for an
// acquisition (attempt.go). A node that did not transfer held someone
// else's key, or none, or did not answer. Exclusion: the old holder's
// critical section ended when it called Unlock, before the round; while
// a quorum holds the new token, no one else can gather one.
//
// A transfer that falls short (too few nodes, validity gone) is undone as
// a failed acquisition is: our own key is released on every node and the
// new token on every node that took it or may have (both announced), and
// the waiter, never told, is woken by those announcements as after any
// release. A waiter whose Lock call ended while a transfer to it was
// under way (cancelled, timed out) never gets the lock: it is released,
// announced, by whichever side sees the other gone.
//
// Fairness. Transfers only pass the key among one locker's waiters, who
// take turns in arrival order. Waiters of other lockers (other
// processes) join the key's queue on the nodes once refused (fair.go),
// and a node does not hand over a key whose queue has an entry: it
// answers errWaitersQueued, and Unlock releases the key there as a fair
// lock's release does (toQueue), granting it to the queue's head; the
// locker's own waiter, woken, finds the key taken by another locker and
// queues behind. So a queued call waits for no transfer that began after
// it was queued. (A transfer that reached a quorum while a minority
// answered errWaitersQueued, a call queuing there as the round ran, is
// kept, and the key released to the queue on that minority, which would
// otherwise hold our old token until its TTL.) Waiters that never queue
// (WithFairness(false), fenced locks, sets, other libraries' clients) only
// see the key released: after handoffChain transfers in a row the next
// Unlock releases instead, and the key goes to whoever wins it, waiters
// of this locker included.
//
// Semaphore permits. A permit is the lock of one slot (semaphore.go), and
// its Unlock hands it, the same way, to a waiter of the same locker in
// line for that slot: the first one in line that is not already being
// handed, or holding, a permit of another slot. A semaphore call takes
// transfers for all its slots through one transferSlot, so that it is
// handed at most one permit; the permit it wakes with is that of the
// slot the lock's key names.
//
// Not transferred: locks whose Unlock comes after their validity, fenced
// locks and permits (the next holder needs a fencing token of its own,
// which only an acquisition issues), sets (LockMany), reader and writer
// shares; and waiters of any of those.

// handoffChain bounds consecutive transfers of a key within one locker,
// for the waiters that do not queue; see above. Each release it forces
// costs the line about three round trips more than a transfer (the
// release, its announcement, an acquisition).
const handoffChain = 32

// transferSlot is where an Unlock of the waiter's locker leaves the lock
// it handed to the waiter. The waiter's wakeup carries it while in line.
type transferSlot struct {
	s     scope  // the waiter's: its TTL, drift allowance and token suffix
	wake  func() // the waiter's wake-up
	spend func() // spends a wake-up of wake's still pending once the lock is taken

	mu   sync.Mutex
	busy bool  // an Unlock is transferring to the waiter
	gone bool  // the waiter's call is over, or took a handed lock: nothing is handed to it any more
	got  *Lock // handed over, not taken yet
}

// free reports whether t can be claimed; t.mu held.
func (t *transferSlot) free() bool { return !t.busy && !t.gone && t.got == nil }

// transferable reports whether a lock of s can be handed over by a
// transfer round: a plain lock on one key, without fencing, with
// hand-off on.
func (s scope) transferable() bool {
	return s.what == target(oneKey{}) && s.keys == nil && !s.cfg.fencing && !s.cfg.noHandoff
}

// claim returns the slot of the first waiter in line for key, marked
// busy, if it takes transfers and none is under way or waiting to be
// taken; otherwise nil. For a permit (passOn), the first waiter whose slot
// is not taken (a call of the semaphore being handed, or holding, a
// permit of another slot) is the one; a waiter that takes no transfers
// still ends the search.
func (ls *lines) claim(key string, passOn bool) *transferSlot {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[key]
	if l == nil {
		return nil
	}
	for _, w := range l.waiters {
		t := w.transfer
		if t == nil {
			return nil
		}
		t.mu.Lock()
		if t.free() {
			t.busy = true
			t.mu.Unlock()
			return t
		}
		t.mu.Unlock()
		if !passOn {
			return nil
		}
	}
	return nil
}

// deliver ends the transfer under way: it leaves lock (nil when the
// transfer failed) for the waiter and wakes it. It reports false when the
// waiter is gone; the caller must then let go of lock.
func (t *transferSlot) deliver(lock *Lock) bool {
	t.mu.Lock()
	t.busy = false
	if t.gone {
		t.mu.Unlock()
		return false
	}
	t.got = lock
	t.mu.Unlock()
	if lock != nil {
		t.wake()
	}
	return true
}

// take returns the lock handed to the waiter, if any, once; the waiter
// then takes no more transfers.
func (t *transferSlot) take() *Lock {
	t.mu.Lock()
	l := t.got
	t.got = nil
	if l != nil {
		t.gone = true
	}
	t.mu.Unlock()
	if l != nil && t.spend != nil {
		// Spend the wake-up that came with it: left pending, leaving the
		// line would pass it on, and the next waiter would attempt on a
		// key that we now hold.
		t.spend()
	}
	return l
}

// abandon marks the waiter gone and returns a lock handed to it and not
// taken, which the caller must let go of.
func (t *transferSlot) abandon() *Lock {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone = true
	l := t.got
	t.got = nil
	return l
}

// transferred returns the lock an Unlock handed to w, if any, while w's
// call is still on.
func (w *waiter) transferred() *Lock {
	if w.wake == nil || w.wake.transfer == nil || w.ctx.Err() != nil {
		return nil
	}
	return w.wake.transfer.take()
}

// dropTransfer ends w's taking of transfers, once it has left its line;
// a lock handed to it meanwhile is released.
func (w *waiter) dropTransfer() {
	if w.wake == nil || w.wake.transfer == nil {
		return
	}
	w.wake.transfer.letGo(w.ctx)
}

// letGo marks t's waiter gone and releases a lock handed to it and not
// taken (announced, so that the next waiter wakes).
func (t *transferSlot) letGo(ctx context.Context) {
	if l := t.abandon(); l != nil {
		_, mark := l.cfg.lines.beginRound(l.key, time.Time{}) // lines.busy
		defer l.cfg.lines.endRound(l.key, time.Time{}, mark)
		l.cfg.lines.unheld(l.key, l.token)
		l.scope().releaseAll(ctx, l.token)
	}
}

// markHeld records that w took lock (lines.held), when it is the lock of
// one key, plain or fair, which excludes every other taker of the key. (A
// reader's share would not exclude another reader.) try calls it where
// a lock is taken, by an attempt (before its round counts as over,
// lines.busy) or a claim; a transferred lock was recorded by the
// transfer (Lock.transfer).
func (w *waiter) markHeld(lock *Lock) {
	if lock != nil && w.keys == nil && (w.what == target(oneKey{}) || w.fair() != nil) {
		w.cfg.lines.held(w.key, lock.own(), w.wake != nil && w.fair() == nil)
	}
}

// yields reports whether w, in line for a plain key (a fair waiter goes
// by the queue), should leave its timer's attempt out: the line's first
// waiter is taking a release of this locker (lines.yield).
func (w *waiter) yields() bool {
	return w.wake != nil && w.keys == nil && w.fair() == nil && w.cfg.lines.yieldingTo(w.key, w.wake, w.cfg.clock.Now())
}

// heldHere reports whether a lock of w's locker that a waiter in line
// took is still valid: an attempt would be refused (line.heldUntil).
func (w *waiter) heldHere() (time.Time, bool) {
	if w.wake == nil {
		return time.Time{}, false
	}
	until := w.cfg.lines.heldUntil(w.key)
	return until, w.cfg.clock.Now().Before(until)
}

// letGo is Unlock's round: a transfer to the locker's first waiter for
// the key when one can take it (see above), a release otherwise.
//
// The line keeps the lock as its holder (line.heldUntil) while a transfer
// is under way, and the new lock once it succeeded: the key is held all
// along, and the other waiters need not ask the nodes.
func (l *Lock) letGo(ctx context.Context, until time.Time) error {
	// Until the round is over, the key may still hold our token where
	// the locker's record (lines.own) no longer shows it (lines.busy).
	_, mark := l.cfg.lines.beginRound(l.key, time.Time{})
	defer l.cfg.lines.endRound(l.key, time.Time{}, mark)
	var t *transferSlot
	if l.chain < handoffChain && l.scope().transferable() && l.cfg.clock.Now().Before(until) {
		t = l.cfg.lines.claim(l.key, l.slot >= 0)
	}
	if t == nil {
		if l.slot != -1 || l.what != target(oneKey{}) || l.cfg.noHandoff {
			l.cfg.lines.unheld(l.key, l.token)
			return l.release(ctx, until)
		}
		// A plain lock (fenced or not): the release wakes the line's first
		// waiter, and the others wait for its attempt (lines.yield, which
		// also forgets the lock), for the release's and two rounds'
		// timeouts at most.
		clock := l.cfg.clock
		l.cfg.lines.yield(l.key, l.token, clock.Now().Add(3*l.cfg.timeout()+handoffSpread))
		err := l.release(ctx, until)
		l.cfg.lines.releasedAt(l.key, clock.Now())
		return err
	}
	return l.transfer(ctx, until, t)
}

// toQueue returns s releasing as a fair lock does (fairHeld, with no
// entry of its own to remove): the release grants the key to the head of
// its queue and announces it. Over a node that keeps no queues (it never
// answers errWaitersQueued) s is returned as it is.
func (s scope) toQueue() scope {
	s.what = fairHeld{}
	return s
}

// transfer hands the lock over to t's waiter, or, failing that, undoes
// the transfer and releases the lock (see above). Its rounds run on a
// context detached from ctx's cancellation, each bounded by the per-node
// timeout, as releases do.
func (l *Lock) transfer(ctx context.Context, until time.Time, t *transferSlot) error {
	s, ws := l.scope(), t.s
	ttl, drift, clock := ws.cfg.ttl, ws.cfg.drift(), ws.cfg.clock
	token := newToken(ws.cfg.tokenSuffix)
	start := clock.Now()
	r := s.fanOut(context.WithoutCancel(ctx), "transfer", ErrNotHeld, func(ctx context.Context, _ int, n *node) (bool, error) {
		return n.transfer(ctx, l.key, l.token, token, ttl)
	})
	queued := r.nodesThat(errWaitersQueued) // still ours there
	left := validity(ttl, clock.Now().Sub(start), drift)
	if r.granted >= quorum(len(l.nodes)) && left > 0 {
		next := &Lock{key: l.key, what: l.what, token: token, slot: -1, nodes: l.nodes, cfg: ws.cfg, acquired: start, watched: true,
			until: start.Add(ttl - drift), chain: l.chain + 1}
		l.cfg.lines.held(l.key, next.own(), true)
		if !t.deliver(next) {
			l.cfg.lines.unheld(l.key, token)
			next.scope().releaseAll(ctx, token) // the waiter is gone
		}
		if len(queued) > 0 { // a waiter queued there as the round ran
			s.toQueue().on(queued).releaseAll(ctx, l.token)
		}
		if late := l.cfg.clock.Now().Sub(until); late > 0 {
			return fmt.Errorf("%w: %q expired %v before Unlock", ErrNotHeld, l.key, late)
		}
		return nil
	}
	l.cfg.lines.unheld(l.key, l.token)
	t.deliver(nil)
	// Ours first: a transfer still in flight to a node finds our key gone
	// there and does nothing; one that landed is undone next. Where Lock
	// calls are queued, the release grants the key to the queue's head.
	rel := s
	if len(queued) > 0 {
		rel = s.toQueue()
	}
	rr := rel.releaseAll(ctx, l.token)
	var undo []*node
	for i, err := range r.errs {
		if err != ErrNotHeld && err != errWaitersQueued {
			undo = append(undo, l.nodes[i])
		}
	}
	if len(undo) > 0 {
		s.on(undo).releaseAll(ctx, token)
	}
	// Our key is gone from a node that transferred it or released it.
	gone := round{nodes: l.nodes, errs: rr.errs}
	for i := range l.nodes {
		if r.errs[i] == nil {
			gone.errs[i] = nil
		}
		if gone.errs[i] == nil {
			gone.granted++
		}
	}
	if late := l.cfg.clock.Now().Sub(until); late > 0 {
		return fmt.Errorf("%w: %q expired %v before Unlock", ErrNotHeld, l.key, late)
	}
	if gone.granted < quorum(len(l.nodes)) {
		return gone.quorumError("release", l.key, 0)
	}
	return nil
}
