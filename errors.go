package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Every error returned by this package that means one of
// these matches it with [errors.Is]; detail is reachable with [errors.As]
// on a [*QuorumError].
var (
	// ErrNotAcquired means the lock is held by someone else: the Reject
	// strategy failed at once, retries ran out, or the context ended while
	// waiting.
	ErrNotAcquired = errors.New("redlock: lock not acquired")

	// ErrTimeout means the Retry strategy used up its retries while the lock
	// stayed held. It also matches ErrNotAcquired.
	ErrTimeout = fmt.Errorf("%w: retries exhausted", ErrNotAcquired)

	// ErrNotHeld means Unlock or Extend was called on a lock that is no
	// longer ours: it expired, was taken over, or was already released.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrUnavailable means too few nodes answered to decide: fewer than a
	// quorum replied at all. It does not match ErrNotAcquired, so callers
	// can tell "busy" (retry later, HTTP 409) from "broken" (HTTP 500).
	ErrUnavailable = errors.New("redlock: too few nodes available")

	// ErrInvalid is matched by every error about bad input: an empty key,
	// a TTL that leaves no validity, nil or duplicate nodes, and so on.
	ErrInvalid = errors.New("redlock: invalid argument")

	// ErrLockLost means a lock stopped being ours while its holder was still
	// working under it: a heartbeat extension failed to reach a quorum, or
	// validity ran out before an extension succeeded. Do cancels its
	// function's context with a cause matching ErrLockLost (read it with
	// [context.Cause]) and returns an error matching it. Work done after
	// the loss may have overlapped with another holder's; fencing tokens
	// (WithFencing) let the protected resource refuse it.
	ErrLockLost = errors.New("redlock: lock lost")
)

// invalidf returns an error that matches ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// shorten returns s, or its start and length when it is long: an error
// never carries a megabyte key or reply.
func shorten(s string) string {
	const keep = 64
	if len(s) <= 2*keep {
		return s
	}
	return s[:keep] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// NodeError is what one node said when it did not grant an operation.
type NodeError struct {
	Node string // the node's Name, usually its address
	// Err is ErrNotAcquired when an acquire found the key held, ErrNotHeld
	// when an extend or release found the key gone or someone else's, and
	// the transport or timeout error otherwise.
	Err error
}

func (e *NodeError) Error() string { return e.Node + ": " + e.Err.Error() }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError reports an operation that did not reach a quorum, or reached
// it too late, with what every dissenting node said.
//
// It matches exactly one sentinel. A quorum that came too late matches
// ErrNotAcquired (for "acquire") or ErrNotHeld (for "extend" and
// "release"). Otherwise the nodes' answers decide: an acquisition is
// ErrNotAcquired when the nodes that answered at all, yes or no, make a
// quorum (the key is held by someone else on the others), and
// ErrUnavailable when fewer answered. An extension or release is ErrNotHeld
// only when the nodes that answered "not ours" leave fewer than a quorum
// that may still hold our token; when the nodes that did not answer could
// complete a quorum, nobody can tell whether the lock is still held, and
// it is ErrUnavailable: a lost reply is never reported as a lost lock.
type QuorumError struct {
	Op      string // "acquire", "extend" or "release"
	Key     string
	Nodes   int // nodes asked
	Quorum  int // nodes that had to agree
	Granted int // nodes that agreed
	// Validity is what was left of the lock's validity when the round
	// ended. It is only meaningful when Granted >= Quorum: the round reached
	// a quorum but took so long that nothing (or a negative amount) was left.
	Validity time.Duration
	Failed   []NodeError // the nodes that did not agree, in node order
}

// refusals counts the nodes that gave a definite no.
func (e *QuorumError) refusals() int {
	n := 0
	for _, f := range e.Failed {
		if errors.Is(f.Err, ErrNotAcquired) || errors.Is(f.Err, ErrNotHeld) {
			n++
		}
	}
	return n
}

// Unwrap returns the sentinel this failure means.
func (e *QuorumError) Unwrap() error {
	no := e.refusals()
	unknown := len(e.Failed) - no
	switch {
	case e.Op == "acquire" && e.Granted < e.Quorum && e.Granted+no < e.Quorum:
		return ErrUnavailable
	case e.Op == "acquire":
		return ErrNotAcquired
	case e.Granted < e.Quorum && e.Granted+unknown >= e.Quorum:
		return ErrUnavailable
	default:
		return ErrNotHeld
	}
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q: %d of %d nodes agreed, quorum %d", e.Op, shorten(e.Key), e.Granted, e.Nodes, e.Quorum)
	if e.Granted >= e.Quorum {
		fmt.Fprintf(&b, ", but validity ran out (%v left)", e.Validity)
	}
	for i, f := range e.Failed {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.Error())
	}
	return b.String()
}

// The errors a Lock call ends with when its attempts did not take the
// key. Each is one allocation, and its text is built only when read;
// errors_test.go checks their text and what they match.

// timedOut: the strategy gave up while the key stayed held. It matches
// ErrTimeout and whatever the last attempt's error matches.
type timedOut struct {
	attempts int
	errs     [2]error // ErrTimeout, the last attempt's error
}

func (e *timedOut) Error() string {
	return e.errs[0].Error() + " after " + strconv.Itoa(e.attempts) + " attempts: " + errText(e.errs[1])
}

func (e *timedOut) Unwrap() []error { return e.errs[:] }

// gaveUp: the strategy gave up while too few nodes answered. It matches
// what the last attempt's error matches (ErrUnavailable).
type gaveUp struct {
	attempts int
	last     error
}

func (e *gaveUp) Error() string {
	return "redlock: gave up after " + strconv.Itoa(e.attempts) + " attempts: " + errText(e.last)
}

func (e *gaveUp) Unwrap() error { return e.last }

// cancelledWaiting: the caller's context ended while Lock waited. It
// matches ErrNotAcquired, the context's cause, and whatever the last
// attempt's error matches.
type cancelledWaiting struct {
	errs [3]error // ErrNotAcquired, the context's cause, the last attempt's error
}

func (e *cancelledWaiting) Error() string {
	return e.errs[0].Error() + ": " + errText(e.errs[1]) + " (last attempt: " + errText(e.errs[2]) + ")"
}

func (e *cancelledWaiting) Unwrap() []error { return e.errs[:] }

// inLine: a call that joined its locker's line made no attempt yet; it
// is the call's error until its first attempt. It matches
// ErrNotAcquired.
type inLine struct{ key string }

func (e *inLine) Error() string {
	return ErrNotAcquired.Error() + ": " + strconv.Quote(e.key) + ": in line behind this locker's waiters"
}

func (e *inLine) Unwrap() error { return ErrNotAcquired }

// errText is err's text as %w prints it, a nil error included.
func errText(err error) string {
	if err == nil {
		return "%!w(<nil>)"
	}
	return err.Error()
}
