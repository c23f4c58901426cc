package redlock

import "time"

// Clock is the time source the lockers read. Validity is computed from two
// readings of Now, so a Clock must return monotonic readings (as
// [time.Now] does); After waits between retries.
//
// The default is the system clock. Tests replace it with [WithClock] to
// drive the validity arithmetic and the retry delays deterministically.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// systemClock is the default Clock: time.Now, which carries a monotonic
// reading, and time.After.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
