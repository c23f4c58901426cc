package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A Lock is one acquisition of a key, returned by Lock. It is valid until
// Until; after that the nodes may hand the key to someone else. A Lock is
// safe for concurrent use.
type Lock struct {
	key   string
	token string
	nodes []Backend
	cfg   config

	mu       sync.Mutex
	until    time.Time
	released bool
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.key }

// Token returns the random value stored under the key on every node that
// granted the lock, unique per acquisition (a UUID v4). Only the holder of
// the token can release or extend the lock.
func (l *Lock) Token() string { return l.token }

// Until returns the end of the lock's validity, on the clock the locker
// reads: the start of the acquisition (or of the last successful
// extension) plus the TTL minus the drift allowance.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Unlock releases the lock on every node with release.lua, so it never
// deletes a key that another holder has since taken. It runs even when ctx
// is already cancelled (a cancelled request must still let go), bounded by
// the per-node timeout.
//
// Unlock returns nil when a quorum of nodes released our key while it was
// still valid. It returns an error matching ErrNotHeld when the lock was
// already released, when its validity had run out (the critical section may
// have overlapped with another holder's), or when too few nodes still had
// our key; ErrUnavailable when too few nodes answered.
func (l *Lock) Unlock(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background() // releasing matters more than the caller's mistake
	}
	l.mu.Lock()
	released, until := l.released, l.until
	l.released = true
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q already released", ErrNotHeld, l.key)
	}
	r := releaseAll(ctx, l.nodes, l.cfg.timeout(), l.key, l.token)
	if late := l.cfg.clock.Now().Sub(until); late > 0 {
		return fmt.Errorf("%w: %q expired %v before Unlock", ErrNotHeld, l.key, late)
	}
	if r.granted < quorum(len(l.nodes)) {
		return r.quorumError("release", l.key, 0)
	}
	return nil
}

// Extend pushes the lock's expiry out to ttl from now on every node that
// still holds our token, with compare-and-pexpire (extend.lua); it never
// re-creates a key that expired. It succeeds only when a quorum extended
// before the current validity ran out; the new validity is then
// ttl − elapsed − drift, as for an acquisition. On failure the lock keeps
// its old validity and the error matches ErrNotHeld (or ErrUnavailable
// when too few nodes answered).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if err := l.cfg.validateTTL(ttl); err != nil {
		return err
	}
	l.mu.Lock()
	released, until := l.released, l.until
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q already released", ErrNotHeld, l.key)
	}
	clock := l.cfg.clock
	start := clock.Now()
	if !start.Before(until) {
		return fmt.Errorf("%w: %q expired %v ago", ErrNotHeld, l.key, start.Sub(until))
	}
	r := fanOut(ctx, l.nodes, l.cfg.timeout(), ErrNotHeld, func(ctx context.Context, b Backend) (bool, error) {
		return b.Extend(ctx, l.key, l.token, ttl)
	})
	end := clock.Now()
	drift := driftFor(ttl, l.cfg.driftFactor)
	left := validity(ttl, end.Sub(start), drift)
	if r.granted < quorum(len(l.nodes)) || left <= 0 || !end.Before(until) {
		return r.quorumError("extend", l.key, min(left, until.Sub(end)))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: %q released during Extend", ErrNotHeld, l.key)
	}
	l.until = start.Add(ttl - drift)
	return nil
}
