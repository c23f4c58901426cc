package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
)

// acquire is the strategy engine shared by Single and Redlock: attempt,
// and on contention or unavailability ask the strategy whether and how
// long to wait before the next attempt.
func acquire(ctx context.Context, nodes []Backend, base config, key string, opts []Option) (*Lock, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if key == "" {
		return nil, invalidf("empty key")
	}
	cfg := base.with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.validateNodes(nodes); err != nil {
		return nil, err
	}
	start := cfg.clock.Now()
	lock, attempts, err := retryLoop(ctx, nodes, &cfg, key)
	e := Event{Kind: EventAcquire, Key: key, Duration: cfg.clock.Now().Sub(start), Attempt: attempts, Err: err}
	if lock != nil {
		e.Fence = lock.fence
	}
	cfg.observe(e)
	return lock, err
}

// retryLoop makes attempts until one succeeds or the strategy gives up, and
// reports how many it made. Between retries it waits for the strategy's
// delay or, with hand-off (notify.go), for a release, whichever is first;
// attempts made on a release are extra and do not count as retries.
//
// With hand-off, the waiters of one process for a key stand in line
// (notify.go) and take turns: a Lock call that finds a line joins it
// without a first attempt, and a waiter behind others lets its delays
// pass without attempting. Only the first in line attempts, on a release
// or on its delay. The strategy's delays still bound the whole wait, so
// a waiter far back in a long line may end with ErrTimeout having made
// few attempts of its own.
func retryLoop(ctx context.Context, nodes []Backend, cfg *config, key string) (*Lock, int, error) {
	token := uuid.NewString()
	dirty := make([]bool, len(nodes))
	attempts := 0
	gate := -1 // the hand-off gate for woken attempts, once subscribed
	try := func(woken bool) (*Lock, error) {
		attempts++
		start := cfg.clock.Now()
		var g *int
		if woken {
			g = &gate
		}
		lock, err := attempt(ctx, nodes, cfg, key, token, dirty, g)
		if err != nil {
			cfg.observe(Event{Kind: EventContention, Key: key, Attempt: attempts, Duration: cfg.clock.Now().Sub(start), Err: err})
		}
		return lock, err
	}
	var (
		subscribed bool
		wake       *wakeup // release notifications, once subscribed
		woken      <-chan struct{}
	)
	var lock *Lock
	var err error
	if queueFirst(nodes, cfg, key) {
		// Others of this process wait for the key: stand in line behind
		// them. The first attempt comes on our turn, or after the first
		// backoff delay at the latest.
		err = fmt.Errorf("%w: %q: queued behind this process's waiters", ErrNotAcquired, key)
	} else {
		lock, err = try(false)
	}
	for retry := 0; err != nil; retry++ {
		if ctx.Err() != nil {
			return nil, attempts, cancelled(ctx, err)
		}
		delay, ok := cfg.strategy.Backoff(retry)
		if !ok {
			return nil, attempts, exhausted(retry, attempts, err)
		}
		timer := cfg.clock.After(delay) // subscribing below must not lengthen the delay
		if !subscribed && !cfg.noHandoff && delay > 0 {
			subscribed = true
			var stop func()
			if wake, stop = watchReleases(ctx, nodes, cfg, key); wake != nil {
				defer stop()
				woken = wake.ch
				if len(nodes) > 1 {
					gate = gateFor(key, nodes)
				}
				// Subscribed: a release before this point is seen by this
				// extra attempt, every later one by a notification. A
				// waiter behind others of this process needs no extra
				// attempt: such a release woke the first in line.
				if wake.first() {
					wake.reset()
					if lock, err = try(false); err == nil {
						break
					}
					if ctx.Err() != nil {
						return nil, attempts, cancelled(ctx, err)
					}
				}
			}
		}
	waiting:
		for {
			select {
			case <-ctx.Done():
				return nil, attempts, cancelled(ctx, err)
			case <-timer:
				break waiting
			case <-woken:
				if gate < 0 && !spread(ctx, len(nodes)) {
					continue // ctx ended: the next select returns
				}
				wake.reset()
				if lock, err = try(true); err == nil {
					return lock, attempts, nil
				}
			}
		}
		if wake != nil {
			if !wake.first() {
				// Others of this process are ahead in line: the delay
				// passes without an attempt, so we do not barge in
				// between a release and the waiter it woke. The strategy
				// still bounds how long we stand in line.
				continue
			}
			wake.reset()
		}
		lock, err = try(false)
	}
	return lock, attempts, nil
}

// queueFirst reports whether a Lock call should skip its immediate first
// attempt and join this process's line for the key: only with hand-off,
// a Retry strategy that waits (a custom Strategy is not consulted ahead of
// its time), and someone already in line.
func queueFirst(nodes []Backend, cfg *config, key string) bool {
	r, ok := cfg.strategy.(retry)
	if cfg.noHandoff || !ok || r.retries == 0 || r.base <= 0 {
		return false
	}
	return waiting(key, nodes)
}

// handoffSpread bounds the random pause a woken Redlock waiter takes
// before its attempt when the hand-off gate (gate.go) failed. Waiters of
// several processes (one each, see queue) wake on the same release;
// attempting all at once splits the nodes' votes so that often nobody
// reaches a quorum, everyone rolls back, and the rollbacks wake everyone
// again. Spreading the attempts over about a round trip lets one waiter
// take every node first; with a herd of seven and no gate,
// BenchmarkHandoff measured about a quarter off the hand-off time with
// five nodes. A single node has no votes to split.
const handoffSpread = time.Millisecond

// spread pauses a woken waiter for a random part of handoffSpread when
// there are several nodes. It reports false if ctx ended first.
func spread(ctx context.Context, nodes int) bool {
	if nodes == 1 {
		return true
	}
	t := time.NewTimer(rand.N(handoffSpread))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// attempt tries once on every node: quorum and positive validity grant the
// lock. Anything less is rolled back at once on every node that granted or
// may have: those that agreed, and those that failed or timed out in this
// or an earlier attempt of the same call (their SET may land late). A node
// that answered no held someone else's key at that moment, so it cannot
// hold ours and is left alone; dirty carries that knowledge across
// attempts.
//
// gate, when not nil, points at the index of the hand-off gate (gate.go)
// for a woken waiter, or at -1; attempt sets it to -1 when the gate fails.
func attempt(ctx context.Context, nodes []Backend, cfg *config, key, token string, dirty []bool, gate *int) (*Lock, error) {
	start := cfg.clock.Now()
	var counters []int64 // with fencing, what each node's INCR returned
	if cfg.fencing {
		counters = make([]int64, len(nodes))
	}
	call := func(ctx context.Context, i int, b Backend) (bool, error) {
		if counters == nil {
			return b.Acquire(ctx, key, token, cfg.ttl)
		}
		ok, c, err := b.(Fencer).AcquireFenced(ctx, key, token, cfg.ttl)
		counters[i] = c
		return ok, err
	}
	var r round
	if gate != nil && *gate >= 0 {
		var held, failed bool
		if r, held, failed = gatedRound(ctx, nodes, cfg, key, *gate, call); held {
			return nil, errGateHeld(key, nodes[*gate])
		}
		if failed {
			*gate = -1
		}
	} else {
		r = fanOut(ctx, nodes, cfg, "acquire", key, ErrNotAcquired, call)
	}
	left := validity(cfg.ttl, cfg.clock.Now().Sub(start), cfg.drift())
	if r.granted >= quorum(len(nodes)) && left > 0 && ctx.Err() == nil {
		var f int64
		if counters != nil {
			var err error
			if f, err = fence(ctx, nodes, cfg, key, token, r, counters); err != nil {
				rollback(ctx, nodes, cfg, key, token, r, dirty)
				return nil, err
			}
			left = validity(cfg.ttl, cfg.clock.Now().Sub(start), cfg.drift())
		}
		if left > 0 && ctx.Err() == nil {
			return newLock(key, token, f, nodes, cfg, start), nil
		}
	}
	rollback(ctx, nodes, cfg, key, token, r, dirty)
	return nil, r.quorumError("acquire", key, left)
}

// rollback releases a failed attempt on every node that granted it or may
// have, now or in an earlier attempt of the same call.
func rollback(ctx context.Context, nodes []Backend, cfg *config, key, token string, r round, dirty []bool) {
	var undo []Backend
	for i, err := range r.errs {
		dirty[i] = dirty[i] || err != ErrNotAcquired
		if dirty[i] {
			undo = append(undo, nodes[i])
		}
	}
	if len(undo) > 0 {
		releaseAll(ctx, undo, cfg, key, token)
	}
}

// cancelled wraps the last attempt's error when ctx ended while waiting:
// the result matches ErrNotAcquired, the context's error, and whatever the
// last attempt matched.
func cancelled(ctx context.Context, last error) error {
	return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotAcquired, context.Cause(ctx), last)
}

// exhausted is the error after the strategy gave up. Contention becomes
// ErrTimeout when there were retries; unavailability stays ErrUnavailable.
func exhausted(retries, attempts int, last error) error {
	if retries == 0 {
		return last
	}
	if errors.Is(last, ErrNotAcquired) { // held, not unavailable
		return fmt.Errorf("%w after %d attempts: %w", ErrTimeout, attempts, last)
	}
	return fmt.Errorf("redlock: gave up after %d attempts: %w", attempts, last)
}
