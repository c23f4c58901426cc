package redlock

import (
	"testing"

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
