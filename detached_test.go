package redlock

import (
	"context"
	"testing"
	"time"
)

// detached drops cancellation and deadline and keeps values; a context
// that has neither is used as it is.
func TestDetached(t *testing.T) {
	type k struct{}
	bg := context.Background()
	if got := detached(bg); got != bg {
		t.Errorf("detached(Background) = %v, want Background itself", got)
	}
	vctx := context.WithValue(bg, k{}, "v")
	if got := detached(vctx); got != vctx {
		t.Errorf("detached(a value on Background) = %v, want it unchanged", got)
	}
	cctx, cancel := context.WithCancel(vctx)
	cancel()
	tctx, stop := context.WithTimeout(vctx, time.Hour)
	defer stop()
	if !raceEnabled {
		var sink context.Context
		if n := testing.AllocsPerRun(100, func() { sink = detached(vctx) }); n != 0 {
			t.Errorf("detaching a context that is never cancelled: %v allocations, want 0", n)
		}
		fresh, stop := context.WithTimeout(bg, time.Hour) // nobody asked for its Done channel
		defer stop()
		if n := testing.AllocsPerRun(100, func() { sink = detached(fresh) }); n != 1 {
			t.Errorf("detaching a context with a deadline: %v allocations, want 1 (WithoutCancel)", n)
		}
		_ = sink
	}
	for name, ctx := range map[string]context.Context{"cancelled": cctx, "with a deadline": tctx} {
		d := detached(ctx)
		if d.Done() != nil || d.Err() != nil {
			t.Errorf("%s: detached context can be cancelled (Err %v)", name, d.Err())
		}
		if _, ok := d.Deadline(); ok {
			t.Errorf("%s: detached context kept a deadline", name)
		}
		if d.Value(k{}) != "v" {
			t.Errorf("%s: detached context lost its values", name)
		}
	}
}
