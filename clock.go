package redlock

import (
	"math"
	"time"
)

// clock is the time source the lockers read. Validity is computed from two
// readings of Now, so a clock must return monotonic readings (as
// time.Now does); After waits between retries.
//
// It is the system clock; tests replace it (export_test.go) to drive the
// validity arithmetic and the retry delays deterministically.
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// systemClock is the clock: time.Now, which carries a monotonic
// reading, and time.After.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// driftFor is the clock-drift allowance: ttl·factor plus 2 ms for the
// millisecond granularity of Redis expiry. Nodes whose clocks run faster
// than ours by more than this break the safety argument. An allowance too
// large for a Duration saturates (and leaves no validity) instead of
// wrapping around to a negative one.
func driftFor(ttl time.Duration, factor float64) time.Duration {
	const granularity = 2 * time.Millisecond
	d := float64(ttl) * factor
	if d >= float64(math.MaxInt64-granularity) {
		return math.MaxInt64
	}
	return time.Duration(d) + granularity
}

// validity is what is left of a lock whose keys were set with ttl during a
// round that took elapsed: TTL − elapsed − drift. Every node's key was set
// after the round started, so each lives at least until start + ttl on the
// node's clock; we claim only start + ttl − drift on ours. Only a positive
// validity grants the lock.
func validity(ttl, elapsed, drift time.Duration) time.Duration {
	return ttl - elapsed - drift
}
