package redlock

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// An Observer is told what a locker's locks go through: acquisitions,
// contention, extensions, losses, releases and failing nodes. It is how a
// service gets metrics and logs out of this package, which logs nothing by
// itself. Set one with WithObserver; SlogObserver logs to a log/slog
// logger.
//
// It is called synchronously, on the goroutine doing the work and possibly
// from several goroutines at once, so it must be safe for concurrent use
// and quick: a slow Observer delays the lock operation (and, for the
// heartbeat, eats into the lock's validity).
type Observer func(Event)

// EventKind says what an Event reports.
type EventKind uint8

// The events an Observer receives.
const (
	// EventAcquire: Lock or Do finished acquiring, successfully (Err nil)
	// or not. Duration is the whole wait including retries, Attempt the
	// number of attempts, Fence the fencing token when WithFencing is on.
	EventAcquire EventKind = iota + 1
	// EventContention: an attempt did not get the lock (Err says why:
	// ErrNotAcquired when held, ErrUnavailable when too few nodes answered)
	// and the strategy is consulted. Attempt counts attempts so far,
	// Duration is how long this attempt took.
	EventContention
	// EventExtend: an extension finished, by Extend or the heartbeat.
	// Duration is how long the round took; Err is nil on success.
	EventExtend
	// EventLost: the lock was lost while held (Err matches ErrLockLost).
	// Duration is how long it had been held.
	EventLost
	// EventRelease: Unlock finished. Duration is how long the lock was
	// held; Err is Unlock's error.
	EventRelease
	// EventNodeError: one node failed a call (a transport error or
	// timeout; not a refusal, nor a call cut short because its caller
	// cancelled, such as an extension in flight when Unlock stops the
	// heartbeat). Node names it, Op is "acquire", "extend",
	// "release", "fence" (the fencing raise round), "watch"
	// (subscribing to release notifications) or "peek" (an election's
	// read of who leads), Duration is how long the call took.
	EventNodeError
)

// String returns the kind's name as slog records show it: "acquire",
// "contention", "extend", "lost", "release" or "node error".
func (k EventKind) String() string {
	switch k {
	case EventAcquire:
		return "acquire"
	case EventContention:
		return "contention"
	case EventExtend:
		return "extend"
	case EventLost:
		return "lost"
	case EventRelease:
		return "release"
	case EventNodeError:
		return "node error"
	}
	return "unknown"
}

// Event is one thing that happened to a lock. Fields that do not apply to
// the Kind are zero.
type Event struct {
	Kind     EventKind
	Key      string // the key; for a set of keys (LockMany) its name, "[k1 k2 ...]"
	Node     string // EventNodeError: the node's Name
	Op       string // EventNodeError: the operation that failed
	Duration time.Duration
	Attempt  int   // EventAcquire, EventContention
	Fence    int64 // EventAcquire with WithFencing (a set's: its first key's)
	Err      error
}

// SlogObserver returns an Observer that logs every event to l as a
// structured record: contention, successful acquisitions, extensions and
// releases at Debug; failed acquisitions at Info when the lock was busy
// and Warn otherwise; failed extensions and releases and node errors at
// Warn; a lost lock at Error. A nil l logs to slog.Default(), as it is
// when each event is logged.
func SlogObserver(l *slog.Logger) Observer { return slogObserver{l}.observe }

type slogObserver struct{ l *slog.Logger }

func (o slogObserver) observe(e Event) {
	level := slog.LevelDebug
	switch {
	case e.Kind == EventLost:
		level = slog.LevelError
	case e.Err == nil, e.Kind == EventContention:
	case e.Kind == EventAcquire && errors.Is(e.Err, ErrNotAcquired):
		level = slog.LevelInfo
	default:
		level = slog.LevelWarn
	}
	ctx := context.Background()
	l := o.l
	if l == nil {
		l = slog.Default()
	}
	if !l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("key", e.Key), slog.Duration("duration", e.Duration)}
	if e.Node != "" {
		attrs = append(attrs, slog.String("node", e.Node), slog.String("op", e.Op))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if e.Fence > 0 {
		attrs = append(attrs, slog.Int64("fence", e.Fence))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	l.LogAttrs(ctx, level, "redlock: "+e.Kind.String(), attrs...)
}
