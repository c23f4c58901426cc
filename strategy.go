package redlock

import (
	"fmt"
	"math"
	"time"
)

// Strategy decides what Lock does when the lock is held by someone else:
// how long to wait before each retry, and how many retries to make. The
// first attempt always happens.
//
// Backoff(retry) returns how long to wait before retry number retry (0
// for the attempt after the first), or ok = false when there is no such
// retry. It must be a pure function of retry, safe for concurrent use: the
// lockers may call it more than once for one retry, and ahead of time (a
// waiter plans the life of its place in a fair queue from the delays to
// come). Every attempt counts, whether a delay ran out or a release woke
// the waiter early: a call makes at most one attempt plus as many retries
// as Backoff grants.
type Strategy interface {
	Backoff(retry int) (delay time.Duration, ok bool)
}

// Reject returns the strategy that fails at once with ErrNotAcquired when
// the lock is held: one attempt, no waiting.
func Reject() Strategy { return reject{} }

type reject struct{}

func (reject) Backoff(int) (time.Duration, bool) { return 0, false }
func (reject) String() string                    { return "reject" }

// Retry returns the strategy that makes a first attempt and then at most
// retries more, waiting baseDelay·2^i before retry i. Retry(3, 100ms)
// makes at most four attempts, waiting 100 ms, 200 ms and 400 ms, then
// gives up with ErrTimeout. The delays are exact (no jitter): with
// hand-off on (the default) a release wakes a waiter earlier, and that
// attempt is the retry it would have made when the delay ran out. A call
// that finds others of its process already waiting for the key stands in
// line behind them instead of attempting at once. ErrTimeout always means
// that the last attempt found the key held.
//
// Negative arguments are reported by New, NewSingle or Lock as ErrInvalid.
func Retry(retries int, baseDelay time.Duration) Strategy {
	return retry{retries: retries, base: baseDelay}
}

// The Retry parameters used when no strategy is given: Retry(3, 100ms),
// waiting 100, 200 and 400 ms, as in the seed configuration.
const (
	defaultRetries    = 3
	defaultRetryDelay = 100 * time.Millisecond
)

type retry struct {
	retries int
	base    time.Duration
	cap     time.Duration // the longest delay; 0: none (exported Retry)
}

// retryForever is the strategy of a campaign (election.go): a retry every
// d, never giving up, so only the caller's context ends the wait. It is a
// retry (not a Strategy of its own) so that campaigners of one locker
// stand in line and are woken by hand-off like any Retry waiter.
func retryForever(d time.Duration) retry {
	return retry{retries: math.MaxInt, base: d, cap: d}
}

func (r retry) Backoff(n int) (time.Duration, bool) {
	if n < 0 || n >= r.retries {
		return 0, false
	}
	const maxDelay = time.Duration(1<<63 - 1)
	d := maxDelay
	if n < 63 && r.base <= maxDelay>>n {
		d = r.base << n
	}
	if r.cap > 0 {
		d = min(d, r.cap)
	}
	return d, true
}

func (r retry) String() string { return fmt.Sprintf("retry(%d, %v)", r.retries, r.base) }

func (r retry) validate() error {
	if r.retries < 0 {
		return invalidf("negative retry count %d", r.retries)
	}
	if r.base < 0 {
		return invalidf("negative retry delay %v", r.base)
	}
	return nil
}
