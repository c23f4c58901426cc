package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// A Lock is one acquisition of a key, returned by Lock. It is valid until
// Until; after that the nodes may hand the key to someone else. A Lock is
// safe for concurrent use.
type Lock struct {
	key      string
	keys     []string // LockMany's set, canonical; nil for one key
	what     target
	token    string
	fences   []int64 // one per key, with WithFencing; nil without
	slot     int     // the semaphore slot it holds, or -1
	nodes    []*node
	cfg      *config   // the call's, never written to (often its locker's)
	acquired time.Time // on cfg.clock, for the held duration reported to observers
	chain    int       // transfers in a row that led to it (handoff.go)
	// watched: taken by a call that listened for releases (or handed to
	// one): its release is recorded for the locker's next waiters
	// (lines.released), whose pub/sub connections may still be
	// subscribed to the key. Uncontended locks skip that.
	watched bool

	mu       sync.Mutex
	until    time.Time
	released bool
	lost     chan struct{} // closed by loss or Unlock, whichever comes first; made by the first Lost
	cause    error         // why the lock was lost; nil while held or after a plain Unlock
	expiry   *time.Timer   // closes lost when validity runs out (Lost without a heartbeat)
	renewal  *renewal      // the heartbeat, while one runs
	onLost   func(error)   // Do's hook: cancels the function's context
}

// scope is the lock's key, nodes and configuration, for its rounds.
func (l *Lock) scope() scope {
	return scope{key: l.key, keys: l.keys, what: l.what, nodes: l.nodes, cfg: l.cfg}
}

// Key returns the locked key. For a lock on several keys (LockMany) it is
// the set's name, as in errors and observer events: the keys in canonical
// order, between brackets and separated by spaces; Keys returns the keys.
func (l *Lock) Key() string { return l.key }

// Keys returns the locked keys: the one key of Lock, or LockMany's set
// without duplicates, in canonical (sorted) order. The slice is a copy.
func (l *Lock) Keys() []string {
	if l.keys == nil {
		return []string{l.key}
	}
	return append([]string(nil), l.keys...)
}

// Token returns the random value stored under the key on every node that
// granted the lock, unique per acquisition (a UUID v4). Only the holder of
// the token can release or extend the lock.
func (l *Lock) Token() string { return l.token }

// own is what the locker records of l while it holds it (lines.held).
func (l *Lock) own() ownLock { return ownLock{token: l.token, acquired: l.acquired, until: l.until} }

// Slot returns the semaphore slot this lock holds, in [0, permits), when
// it is a permit returned by a Semaphore, and -1 for a plain lock. Fencing
// tokens of a semaphore are counted per slot: a fenced resource keeps the
// highest Fence it has seen for each slot and refuses lower ones.
func (l *Lock) Slot() int { return l.slot }

// Fence returns the lock's fencing token: a number that is strictly
// greater than that of every earlier holder of the key, to be sent along
// with every write to the protected resource so it can refuse writes from
// a holder that lost the lock without knowing (see docs/fencing.md and
// WithFencing). It is 0 when the lock was taken without WithFencing. For
// a lock on several keys it is the fence of the first key in Keys; Fences
// has them all.
func (l *Lock) Fence() int64 {
	if l.fences == nil {
		return 0
	}
	return l.fences[0]
}

// Fences returns the lock's fencing tokens, one per key in Keys order,
// each strictly greater than that of every earlier holder of its key,
// whether that holder locked the key alone or within a set; nil without
// WithFencing. The slice is a copy.
func (l *Lock) Fences() []int64 { return append([]int64(nil), l.fences...) }

// Until returns the end of the lock's validity, on the clock the locker
// reads: the start of the acquisition (or of the last successful
// extension) plus the TTL minus the drift allowance.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Lost returns a channel that is closed when the lock stops being held:
//
//   - with a heartbeat (WithAutoRenew, or inside Do), when an extension
//     fails to reach a quorum or validity runs out before one succeeds;
//   - without one, when validity (Until) runs out, as moved by any
//     successful Extend; the first call to Lost arms a timer for that;
//   - in every case, when Unlock is called, so a goroutine watching Lost
//     ends together with the lock.
//
// Lost is a warning, not a guarantee: the lock may be gone on the nodes
// before the channel closes (a node lost its data; its clock jumped), which
// is what fencing tokens are for. Validity is measured on the locker's
// Clock; the timers that watch it run on real time.
func (l *Lock) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		if l.released || l.cause != nil {
			return closedLost // over before anyone asked
		}
		l.lost = make(chan struct{})
	}
	if l.renewal == nil && l.expiry == nil && !l.released && l.cause == nil {
		l.expiry = time.AfterFunc(l.until.Sub(l.cfg.clock.Now()), l.expired)
	}
	return l.lost
}

// closedLost is the Lost channel of a lock that was released or lost before
// Lost was first called: a lock nobody watches makes no channel.
var closedLost = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// expired runs when Lost's timer fires: the lock is lost if validity has
// really run out, otherwise (Extend moved Until) the timer is re-armed.
func (l *Lock) expired() {
	l.mu.Lock()
	if l.released || l.cause != nil {
		l.mu.Unlock()
		return
	}
	if left := l.until.Sub(l.cfg.clock.Now()); left > 0 {
		l.expiry.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(fmt.Errorf("%w: %q: validity ran out", ErrLockLost, l.key))
}

// lose records that the lock was lost, once: it closes Lost, tells Do and
// the observer.
func (l *Lock) lose(cause error) {
	l.mu.Lock()
	if l.released || l.cause != nil {
		l.mu.Unlock()
		return
	}
	l.cause = cause
	if l.lost != nil {
		close(l.lost)
	}
	hook := l.onLost
	l.mu.Unlock()
	if hook != nil {
		hook(cause)
	}
	l.cfg.observe(Event{Kind: EventLost, Key: l.key, Duration: l.cfg.clock.Now().Sub(l.acquired), Err: cause})
}

// lossCause returns why the lock was lost, or nil.
func (l *Lock) lossCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// Unlock releases the lock on every node with release.lua, so it never
// deletes a key that another holder has since taken. It stops the
// heartbeat first, if one runs. It runs even when ctx is already cancelled
// (a cancelled request must still let go), bounded by the per-node
// timeout.
//
// Unlock returns nil when a quorum of nodes released our key while it was
// still valid. It returns an error matching ErrNotHeld when the lock was
// already released, when its validity had run out (the critical section may
// have overlapped with another holder's), or when too few nodes still had
// our key; ErrUnavailable when too few nodes answered. A nil ctx is an
// error (ErrInvalid), reported after the lock was released all the same:
// letting go matters more than the caller's mistake.
func (l *Lock) Unlock(ctx context.Context) error {
	if ctx == nil {
		err := l.Unlock(context.Background())
		return errors.Join(invalidf("nil context given to Unlock (the lock was released anyway)"), err)
	}
	l.stopRenewal()
	l.mu.Lock()
	released, until := l.released, l.until
	l.released = true
	if !released {
		if l.expiry != nil {
			l.expiry.Stop()
		}
		if l.cause == nil && l.lost != nil {
			close(l.lost)
		}
	}
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q already released", ErrNotHeld, l.key)
	}
	err := l.letGo(ctx, until)
	if l.cfg.observer != nil {
		l.cfg.observe(Event{Kind: EventRelease, Key: l.key, Duration: l.cfg.clock.Now().Sub(l.acquired), Err: err})
	}
	return err
}

func (l *Lock) release(ctx context.Context, until time.Time) error {
	r := l.scope().releaseAll(ctx, l.token)
	if l.watched && l.keys == nil && l.slot == -1 && everyNodeAnswered(r) {
		l.cfg.lines.releasedAll(l.key, l.token)
	}
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
// ttl − elapsed − drift, as for an acquisition; ttl minus its drift
// allowance must exceed the node timeout (ErrInvalid otherwise). On
// failure the lock keeps its old validity and the error matches
// ErrNotHeld (or ErrUnavailable when too few nodes answered). A lock whose
// Lost channel closed because it was lost is not extended again:
// ErrNotHeld.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if err := l.cfg.validateTTL(ttl); err != nil {
		return err
	}
	clock := l.cfg.clock
	start := clock.Now()
	err := l.extend(ctx, ttl, start)
	if l.cfg.observer != nil {
		l.cfg.observe(Event{Kind: EventExtend, Key: l.key, Duration: clock.Now().Sub(start), Err: err})
	}
	return err
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration, start time.Time) error {
	l.mu.Lock()
	released, cause, until := l.released, l.cause, l.until
	l.mu.Unlock()
	switch {
	case released:
		return fmt.Errorf("%w: %q already released", ErrNotHeld, l.key)
	case cause != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, cause)
	case !start.Before(until):
		return fmt.Errorf("%w: %q expired %v ago", ErrNotHeld, l.key, start.Sub(until))
	}
	r := l.scope().fanOut(ctx, "extend", ErrNotHeld, func(ctx context.Context, _ int, n *node) (bool, error) {
		return l.what.extend(ctx, l.scope(), n, l.token, ttl)
	})
	end := l.cfg.clock.Now()
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
	if l.cause != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, l.cause)
	}
	l.until = start.Add(ttl - drift)
	if l.expiry != nil {
		l.expiry.Reset(l.until.Sub(end))
	}
	l.cfg.lines.extended(l.key, l.token, l.until)
	return nil
}

// String describes the lock for logs: its key, validity and fencing
// token. It never shows the lock's token, which is what lets anyone
// release it.
func (l *Lock) String() string {
	s := "redlock.Lock{key " + strconv.Quote(shorten(l.key)) + ", until " + l.Until().Format(time.RFC3339Nano)
	if l.fences != nil {
		s += ", fence " + fmt.Sprint(fenceText(l.fences))
	}
	return s + "}"
}

// LogValue is what log/slog records of the lock: its key, validity and
// fencing token, never its token.
func (l *Lock) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("key", shorten(l.key)), slog.Time("until", l.Until())}
	if l.fences != nil {
		attrs = append(attrs, slog.Any("fence", fenceText(l.fences)))
	}
	return slog.GroupValue(attrs...)
}

// Format prints String for every verb, so that %v, %+v and %#v cannot
// show the token either.
func (l *Lock) Format(f fmt.State, _ rune) { fmt.Fprint(f, l.String()) }
