package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// errSink keeps what the allocation checks build on the heap, as a
// caller would.
var errSink error

// The errors that end a Lock call read and match as the fmt.Errorf calls
// they replace did, and cost one allocation each.
func TestWaitErrorsAsFmtMadeThem(t *testing.T) {
	held := &QuorumError{Op: "acquire", Key: "k", Nodes: 3, Quorum: 2,
		Failed: []NodeError{{Node: "a", Err: ErrNotAcquired}, {Node: "b", Err: ErrNotAcquired}, {Node: "c", Err: ErrNotAcquired}}}
	down := &QuorumError{Op: "acquire", Key: "k", Nodes: 3, Quorum: 2,
		Failed: []NodeError{{Node: "a", Err: context.DeadlineExceeded}, {Node: "b", Err: context.DeadlineExceeded}}}
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("request gone")
	cancel(cause)
	for _, c := range []struct {
		name      string
		got, want error
	}{
		{"timed out", exhausted(3, 4, held), fmt.Errorf("%w after %d attempts: %w", ErrTimeout, 4, held)},
		{"gave up", exhausted(3, 4, down), fmt.Errorf("redlock: gave up after %d attempts: %w", 4, down)},
		{"cancelled, held", cancelled(ctx, held), fmt.Errorf("%w: %w (last attempt: %w)", ErrNotAcquired, cause, held)},
		{"cancelled, down", cancelled(ctx, down), fmt.Errorf("%w: %w (last attempt: %w)", ErrNotAcquired, cause, down)},
		{"cancelled, none", cancelled(ctx, nil), fmt.Errorf("%w: %w (last attempt: %w)", ErrNotAcquired, cause, nil)},
		{"in line", &inLine{key: "a \"b\"\n"}, fmt.Errorf("%w: %q: in line behind this locker's waiters", ErrNotAcquired, "a \"b\"\n")},
		{"in line, timed out", exhausted(2, 3, &inLine{key: "k"}), fmt.Errorf("%w after %d attempts: %w", ErrTimeout, 3,
			fmt.Errorf("%w: %q: in line behind this locker's waiters", ErrNotAcquired, "k"))},
	} {
		if c.got.Error() != c.want.Error() {
			t.Errorf("%s: text %q, want %q", c.name, c.got, c.want)
		}
		for _, target := range []error{ErrNotAcquired, ErrTimeout, ErrUnavailable, ErrNotHeld, ErrInvalid,
			context.DeadlineExceeded, context.Canceled, cause} {
			if g, w := errors.Is(c.got, target), errors.Is(c.want, target); g != w {
				t.Errorf("%s: errors.Is(%v) = %v, want %v", c.name, target, g, w)
			}
		}
		var gq, wq *QuorumError
		if g, w := errors.As(c.got, &gq), errors.As(c.want, &wq); g != w || gq != wq {
			t.Errorf("%s: errors.As(*QuorumError) = %v %p, want %v %p", c.name, g, gq, w, wq)
		}
		if g, w := errors.Unwrap(c.got), errors.Unwrap(c.want); g != w {
			t.Errorf("%s: errors.Unwrap = %v, want %v", c.name, g, w)
		}
	}
	if exhausted(0, 1, held) != error(held) {
		t.Error("a strategy that never retried returns the attempt's own error")
	}
	if raceEnabled {
		return // the race detector allocates on its own
	}
	for name, f := range map[string]func(){
		"timed out": func() { errSink = exhausted(3, 4, held) },
		"gave up":   func() { errSink = exhausted(3, 4, down) },
		"cancelled": func() { errSink = cancelled(ctx, held) },
		"in line":   func() { errSink = &inLine{key: "k"} },
	} {
		if n := testing.AllocsPerRun(100, f); n > 1 {
			t.Errorf("%s: %v allocations, want at most 1", name, n)
		}
	}
}
