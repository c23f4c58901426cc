package redlock

import (
	"context"
	"fmt"
	"time"
)

// The heartbeat. While a lock is held under Do (or taken WithAutoRenew), a
// goroutine extends it by the TTL every third of the TTL, counted from
// the end of the previous extension. Two
// things end the lock early, and both close Lost (and cancel Do's
// function) at once with a cause matching ErrLockLost:
//
//   - an extension that fails: the nodes no longer hold our token, or too
//     few answered to tell. Either way we cannot show that a quorum still
//     holds the key, so the holder must stop; the heartbeat does not
//     retry into the unknown;
//   - validity running out before an extension succeeded. This is watched
//     by its own timer, independently of the extension in flight, so a
//     node call that hangs (and even an adapter that ignores its context)
//     cannot keep the holder working past Until.
//
// The extension runs on a child goroutine so the loop keeps watching the
// validity timer; the loop waits for it before returning, so no goroutine
// outlives the heartbeat, and Unlock (or Do) waits for the loop. Timers
// run on real time; the validity they watch is measured on the locker's
// Clock, and the validity timer re-arms instead of declaring a loss when
// the Clock says time is left.

// renewal is a running heartbeat.
type renewal struct {
	stop context.CancelFunc
	done chan struct{}
}

// startRenewal starts the heartbeat. ctx supplies values (not
// cancellation) to the extension calls.
func (l *Lock) startRenewal(ctx context.Context) {
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r := &renewal{stop: stop, done: make(chan struct{})}
	l.mu.Lock()
	l.renewal = r
	l.mu.Unlock()
	go l.heartbeat(ctx, r.done)
}

// stopRenewal stops the heartbeat, if one runs, and waits for it: an
// extension in flight is cancelled and waited for.
func (l *Lock) stopRenewal() {
	l.mu.Lock()
	r := l.renewal
	l.renewal = nil
	l.mu.Unlock()
	if r != nil {
		r.stop()
		<-r.done
	}
}

func (l *Lock) heartbeat(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	every, ttl, clock := l.cfg.renewInterval(), l.cfg.ttl, l.cfg.clock
	tick := time.NewTimer(every)
	defer tick.Stop()
	valid := time.NewTimer(l.Until().Sub(clock.Now()))
	defer valid.Stop()

	var (
		result  chan error // the extension in flight, or nil
		abandon context.CancelFunc
	)
	finish := func() { // cancel and wait for the extension in flight
		if result != nil {
			abandon()
			<-result
		}
	}
	for {
		select {
		case <-ctx.Done():
			finish()
			return
		case <-tick.C:
			ectx, cancel := context.WithCancel(ctx)
			abandon = cancel
			result = make(chan error, 1)
			go func() { result <- l.Extend(ectx, ttl) }()
		case err := <-result:
			abandon()
			result = nil
			if ctx.Err() != nil {
				return // stopped while extending: the failure is ours, not a loss
			}
			if err != nil {
				l.lose(fmt.Errorf("%w: %q: extension failed: %w", ErrLockLost, l.key, err))
				return
			}
			tick.Reset(every)
			valid.Reset(l.Until().Sub(clock.Now()))
		case <-valid.C:
			if left := l.Until().Sub(clock.Now()); left > 0 {
				valid.Reset(left)
				continue
			}
			l.lose(fmt.Errorf("%w: %q: validity ran out before an extension succeeded", ErrLockLost, l.key))
			finish()
			return
		}
	}
}
