package redlock

import "time"

// Internals the external tests (package redlock_test) check directly.
var (
	Quorum             = quorum
	DriftFor           = driftFor
	GateFor            = gateFor
	DefaultTTL         = defaultTTL
	DefaultDriftFactor = defaultDriftFactor
	NewToken           = newToken
)

// RaceEnabled: the test binary runs under the race detector (allocation
// counts are checked only without it).
const RaceEnabled = raceEnabled

// InLine counts l's waiters in line for key that hear its releases (a
// waiter joins its line before it subscribes: see Joined).
func InLine(l Locker, key string) int {
	ls := linesOf(l)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	if q := ls.m[key]; q != nil {
		for _, w := range q.waiters {
			if w.hearing {
				n++
			}
		}
	}
	return n
}

// Joined counts l's waiters in line for key, subscribed or not.
func Joined(l Locker, key string) int {
	ls := linesOf(l)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if q := ls.m[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Waiting reports whether l has waiters in line for key.
func Waiting(l Locker, key string) bool { return linesOf(l).waiting(key) }

// Contended reports whether l records key as contended (fair.go) now.
func Contended(l Locker, key string) bool {
	ls := linesOf(l)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	c, ok := ls.contended[key]
	return ok && time.Now().Before(c.until)
}

// LockerID returns l's id, which begins its fair calls' tickets.
func LockerID(l Locker) string { return linesOf(l).id }

func linesOf(l Locker) *lines {
	switch l := l.(type) {
	case *Single:
		return l.cfg.lines
	case *Redlock:
		return l.cfg.lines
	}
	panic("not a locker of this package")
}

// HandoffChain bounds consecutive transfers of a key within one locker.
const HandoffChain = handoffChain

// LastReleased returns the token l records as its last release of key
// that every node answered (lines.released), "" if none.
func LastReleased(l Locker, key string) string { return linesOf(l).lastReleased(key) }
