package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// acquire is the strategy engine of a Lock call: attempt,
// and on contention or unavailability ask the strategy whether and how
// long to wait before the next attempt.
func acquire(ctx context.Context, s scope) (*Lock, error) {
	start := s.cfg.eventStart()
	w := &waiter{scope: s, ctx: ctx, gate: -1}
	lock, err := w.run() // a lock it returns is recorded (markHeld)
	w.markContended()
	w.stopWatching()
	w.leaveQueue(ctx, lock)
	return s.settle(ctx, start, w.attempts, lock, err)
}

// settle ends an acquisition that started at start (cfg.eventStart) and
// made attempts: it refuses a lock whose validity is already over and
// reports EventAcquire on s.key (the granted lock's key, if any).
func (s scope) settle(ctx context.Context, start time.Time, attempts int, lock *Lock, err error) (*Lock, error) {
	cfg, key := s.cfg, s.key
	if lock != nil && !cfg.clock.Now().Before(lock.until) {
		// Never hand out a lock whose validity is already over (the
		// process was descheduled between the grant and here).
		_ = lock.Unlock(ctx)
		lock, err = nil, fmt.Errorf("%w: %q: validity ran out before Lock returned", ErrNotAcquired, key)
	}
	if cfg.observer == nil {
		return lock, err
	}
	if lock != nil {
		key = lock.key
	}
	e := Event{Kind: EventAcquire, Key: key, Duration: cfg.clock.Now().Sub(start), Attempt: attempts, Err: err}
	if lock != nil {
		e.Fence = lock.Fence()
	}
	cfg.observe(e)
	return lock, err
}

// run makes attempts until one succeeds or the strategy gives up.
func (w *waiter) run() (*Lock, error) {
	if w.ctx.Err() != nil { // nothing is sent for a call that is already over
		return nil, fmt.Errorf("%w: %w (no attempt made)", ErrNotAcquired, context.Cause(w.ctx))
	}
	var err error
	if joinsLine(w.cfg, w.key) {
		// Others of this locker wait for the key: stand in line behind
		// them. The first attempt comes on our turn, or when the first
		// backoff delay runs out at the latest.
		err = &inLine{key: w.key}
	} else {
		if w.subscribesFirst() {
			w.watched = true // waitOut's extra attempt is this one
			w.watch()
		}
		lock, e := w.try(false)
		if e == nil {
			return lock, nil
		}
		err = e
		w.waited = true
		w.joinQueues()
	}
	for retry := 0; ; retry++ {
		if w.ctx.Err() != nil {
			return nil, cancelled(w.ctx, err)
		}
		delay, ok := w.cfg.strategy.Backoff(retry)
		if !ok || !w.mayRetry() {
			if lock := w.transferred(); lock != nil {
				return lock, nil
			}
			return nil, exhausted(retry, w.attempts, err)
		}
		var lock *Lock
		var e error
		retry, lock, e = w.waitDelays(retry, delay)
		if lock != nil {
			return lock, nil
		}
		if e != nil {
			err = e
		}
		if w.ctx.Err() != nil {
			return nil, cancelled(w.ctx, err)
		}
		if w.waitsForGrant(retry) {
			continue
		}
		if !w.mayRetry() {
			if lock := w.transferred(); lock != nil {
				return lock, nil
			}
			return nil, exhausted(retry+1, w.attempts, err)
		}
		if lock, e = w.try(false); e == nil {
			return lock, nil
		}
		err = e
		w.joinQueues()
	}
}

// waitDelays waits out backoff delay retry, delay long, and, for a fair
// waiter that would let the delays after it pass without an attempt
// (waitsForGrant), those delays too, on one timer (lettingPass): a
// waiter far back in the queue sleeps until its grant or its next
// attempt, instead of waking at each delay's end only to sleep again.
// A wake-up by an announcement ends such a stretch: the waiter attempts
// as within any delay (waitOut), in the delay under way, and plans the
// rest anew from what that attempt found. It returns the last delay
// waited out, at whose end the caller attempts, or not, as after any
// delay; and the lock a woken attempt took, or the last woken attempt's
// error, if any.
func (w *waiter) waitDelays(retry int, delay time.Duration) (int, *Lock, error) {
	end := w.cfg.clock.Now().Add(delay) // subscribing in waitOut must not lengthen the delay
	var err error
	for {
		w.inDelay(retry)
		last, until := w.lettingPass(retry, end)
		timer := w.cfg.clock.After(until.Sub(w.cfg.clock.Now()))
		lock, woken, e := w.waitOut(timer, delay, last > retry)
		if lock != nil {
			return last, lock, nil
		}
		if e != nil {
			err = e
		}
		if !woken {
			w.inDelay(last)
			return last, nil, err
		}
		for now := w.cfg.clock.Now(); retry < last && !now.Before(end); {
			retry++
			d, _ := w.cfg.strategy.Backoff(retry)
			end = end.Add(d)
		}
		w.inDelay(retry)
		if lock, e = w.wokenAttempt(); lock != nil {
			return retry, lock, nil
		}
		if e != nil {
			err = e
		}
	}
}

// inDelay records, for a fair waiter, that backoff delay retry is under
// way: the stay of its entry depends on it (fairKey.plan).
func (w *waiter) inDelay(retry int) {
	if f := w.fair(); f != nil {
		f.delay, _ = w.cfg.strategy.Backoff(retry)
	}
}

// waitOut waits until timer fires or ctx ends, making an attempt on every
// wake-up meanwhile; or, when stretch is set (the timer ends several
// delays, see waitDelays), returning at the first wake-up, with woken
// set, for the caller to attempt. It subscribes to releases first, once
// per call, when hand-off is on and there is a delay to wait. It returns
// the lock if a woken attempt took it, else the last woken attempt's
// error, if any.
func (w *waiter) waitOut(timer <-chan time.Time, delay time.Duration, stretch bool) (lock *Lock, woken bool, err error) {
	if !w.watched && !w.cfg.noHandoff && delay > 0 {
		w.watched = true
		if w.watch() && (w.wake.first() || w.queues()) && w.mayRetry() {
			// Subscribed: a release before this point is seen by this
			// extra attempt, every later one by an announcement. A waiter
			// behind others of its locker needs none: such a release
			// woke the first in line; unless it is a call that joined
			// the queues and has yet to enter them (joinQueues).
			lock, e := w.try(false)
			if e == nil {
				return lock, false, nil
			}
			err = e
		}
	}
	var wake <-chan struct{}
	if w.wake != nil {
		wake = w.wake.ch
	}
	for {
		if !w.mayRetry() {
			return nil, false, err // its attempts are spent: it gives up now
		}
		select {
		case <-w.ctx.Done():
			return nil, false, err
		case <-timer:
			return nil, false, err
		case <-wake:
			if stretch {
				return nil, true, err
			}
			lock, e := w.wokenAttempt()
			if lock != nil {
				return lock, false, nil
			}
			if e != nil {
				err = e
			}
		}
	}
}

// wokenAttempt is the attempt of a waiter woken by an announcement: a
// transfer it was given, or an attempt, after the random spread when
// several lockers' waiters may wake at once (see spread). It returns nil
// and no error when ctx ended during the spread.
func (w *waiter) wokenAttempt() (*Lock, error) {
	if lock := w.transferred(); lock != nil {
		return lock, nil
	}
	if !w.mayRetry() {
		return nil, nil // waitOut gives up
	}
	if w.gate < 0 && w.fair() == nil && !spread(w.ctx, len(w.nodes)) {
		return nil, nil
	}
	return w.try(true)
}

// mayRetry reports whether the strategy grants the call another attempt:
// attempt a+1 of a call that made a attempts is retry a-1, whether a delay
// ran out or a release woke the waiter (see Strategy).
func (w *waiter) mayRetry() bool {
	if w.attempts == 0 {
		return true
	}
	_, ok := w.cfg.strategy.Backoff(w.attempts - 1)
	return ok
}

// watch subscribes to the key's releases and joins its locker's line
// for it. It reports whether any node could be subscribed.
func (w *waiter) watch() bool {
	wake, stop := w.watchReleases(w.ctx, w.xfer)
	if wake == nil {
		return false
	}
	w.wake, w.unwatch = wake, stop
	wake.record(w.last)
	if len(w.nodes) > 1 && w.fair() == nil { // fair waiters agree on the head: no gate
		if g := gateFor(w.key, w.nodes); wake.notifies[g] {
			w.gate = g
			wake.gateOn(g)
		}
	}
	return true
}

// stopWatching unsubscribes and leaves the line, once the call is over.
func (w *waiter) stopWatching() {
	if w.unwatch != nil {
		w.unwatch()
		w.unwatch = nil
		w.dropTransfer()
	}
}

// try makes one attempt, woken by a release or not, with a token of its
// own: a late release of an earlier attempt must never delete the key
// that a later attempt set.
func (w *waiter) try(woken bool) (*Lock, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, err
	}
	if lock := w.transferred(); lock != nil {
		return lock, nil
	}
	if lock := w.claim(); lock != nil {
		w.markHeld(lock)
		return lock, nil
	}
	w.attempts++
	if until, held := w.heldHere(); held && !woken && !w.queues() {
		// Held by this locker: the nodes would refuse (line.heldUntil).
		return nil, fmt.Errorf("%w: %q is held by this locker until %v", ErrNotAcquired, w.key, until)
	}
	if !woken && w.yields() {
		return nil, fmt.Errorf("%w: %q was released to the first of this locker's waiters", ErrNotAcquired, w.key)
	}
	token := newToken(w.cfg.tokenSuffix)
	if f := w.fair(); f != nil {
		f.plan(w.cfg)
		f.start, f.attempt = w.cfg.clock.Now(), int64(w.attempts)
		f.behind.Store(0)
	}
	if w.wake != nil {
		w.wake.begin(token)
	}
	start := w.cfg.eventStart()
	began := w.cfg.clock.Now()
	w.sent = w.attempts
	ownBefore, mark := w.cfg.lines.beginRound(w.key, began)
	lock, outcome, err := w.attempt(token, woken && w.gate >= 0)
	w.markHeld(lock) // before the round counts as over (lines.busy)
	w.ownMay = w.cfg.lines.endRound(w.key, w.cfg.clock.Now(), mark) || ownBefore
	w.last = outcome
	if w.wake != nil {
		w.wake.end(outcome)
		w.cfg.lines.yielded(w.key, w.wake, began)
	}
	if err != nil && w.cfg.observer != nil {
		w.cfg.observe(Event{Kind: EventContention, Key: w.key, Attempt: w.attempts, Duration: w.cfg.clock.Now().Sub(start), Err: err})
	}
	return lock, err
}

// joinsLine reports whether a Lock call should skip its immediate first
// attempt and join its locker's line for the key: only with hand-off, a
// strategy that waits, and someone already in line.
func joinsLine(cfg *config, key string) bool {
	// A fair call attempts at once all the same: the attempt queues it on
	// the nodes, where its place is kept (fair.go), and a release names it
	// when its turn comes, wherever it stands in the line.
	return !cfg.fair && waitsForReleases(cfg) && cfg.lines.waiting(key)
}

// cancelled wraps the last attempt's error when ctx ended while waiting:
// the result matches ErrNotAcquired, the context's error, and whatever the
// last attempt matched.
func cancelled(ctx context.Context, last error) error {
	return &cancelledWaiting{errs: [3]error{ErrNotAcquired, context.Cause(ctx), last}}
}

// exhausted is the error after the strategy gave up. Contention becomes
// ErrTimeout when there were retries; unavailability stays ErrUnavailable.
func exhausted(retries, attempts int, last error) error {
	if retries == 0 {
		return last
	}
	if errors.Is(last, ErrNotAcquired) { // held, not unavailable
		return &timedOut{attempts: attempts, errs: [2]error{ErrTimeout, last}}
	}
	return &gaveUp{attempts: attempts, last: last}
}
