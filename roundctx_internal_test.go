package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// newRoundCtx is a round's context on its own, outside a fan.
func newRoundCtx(parent context.Context, timeout time.Duration) *roundCtx {
	c := new(roundCtx)
	c.init(parent, timeout)
	return c
}

func TestRoundCtxDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c := newRoundCtx(parent, 20*time.Millisecond)
	defer c.end(context.Canceled)
	d, ok := c.Deadline()
	if pd, _ := parent.Deadline(); !ok || !d.Before(pd) {
		t.Fatalf("Deadline() = %v, %v; want the round's, before the parent's %v", d, ok, pd)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err() before the deadline = %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not closed at the deadline")
	}
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() after the deadline = %v, want DeadlineExceeded", err)
	}
}

func TestRoundCtxErrWithoutDone(t *testing.T) {
	c := newRoundCtx(context.Background(), time.Millisecond)
	defer c.end(context.Canceled)
	time.Sleep(5 * time.Millisecond)
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() past the deadline, Done never asked = %v, want DeadlineExceeded", err)
	}
	select {
	case <-c.Done(): // made closed: Err was not nil
	default:
		t.Fatal("Done asked after Err reported the deadline is not closed")
	}
}

func TestRoundCtxParentDeadlineBounds(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	c := newRoundCtx(parent, time.Hour)
	defer c.end(context.Canceled)
	if d, _ := c.Deadline(); d.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Deadline() = %v: the parent's earlier deadline must bound the round", d)
	}
}

func TestRoundCtxParentCancelled(t *testing.T) {
	for _, waitFirst := range []bool{false, true} {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		c := newRoundCtx(parent, time.Hour)
		if c.Value(ctxKey{}) != "v" {
			t.Fatal("Value does not reach the parent's")
		}
		if waitFirst {
			done := c.Done()
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Done was not closed when the parent was cancelled")
			}
		} else {
			cancel()
		}
		if err := c.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Err() after the parent's cancellation = %v, want Canceled", err)
		}
		c.end(context.Canceled)
	}
}

func TestRoundCtxEnd(t *testing.T) {
	c := newRoundCtx(context.Background(), time.Hour)
	done := c.Done()
	c.end(context.Canceled)
	select {
	case <-done:
	default:
		t.Fatal("end did not close Done")
	}
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() after end = %v, want Canceled", err)
	}
	c.end(context.DeadlineExceeded) // a second end changes nothing
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() after a second end = %v, want Canceled", err)
	}
}

type ctxKey struct{}

// A round that ends before its deadline gives its timer back for the next
// round; the timer then ends the next round at its own deadline, and
// never the round it served before.
func TestRoundCtxTimerReused(t *testing.T) {
	first := newRoundCtx(context.Background(), time.Hour)
	_ = first.Done()
	timer := first.timer
	first.end(context.Canceled)

	second := newRoundCtx(context.Background(), 10*time.Millisecond)
	defer second.end(context.Canceled)
	select {
	case <-second.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not closed at the deadline")
	}
	if err := second.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() after the deadline = %v, want DeadlineExceeded", err)
	}
	if err := first.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first round's Err() = %v, want Canceled still", err)
	}
	if !RaceEnabled && second.timer != timer { // the race detector's sync.Pool drops at random
		t.Error("the second round made a timer; want the first round's, back from the pool")
	}
}

// A round ended before Done is asked answers Done with a closed channel
// and makes no timer.
func TestRoundCtxDoneAfterEnd(t *testing.T) {
	c := newRoundCtx(context.Background(), time.Hour)
	c.end(context.Canceled)
	select {
	case <-c.Done():
	default:
		t.Fatal("Done of an ended round is not closed")
	}
	if c.timer != nil {
		t.Error("Done of an ended round started a timer")
	}
}

// Rounds whose end races their deadline, many at once (run with -race):
// each Done is closed exactly once, Err agrees with it, and a timer that
// fired is never handed to another round.
func TestRoundCtxEndRacesDeadline(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				c := newRoundCtx(context.Background(), time.Duration((g+i)%5)*50*time.Microsecond)
				done := c.Done()
				if i%2 == 0 {
					time.Sleep(time.Duration(i%3) * 50 * time.Microsecond)
				}
				c.end(context.Canceled)
				<-done
				if err := c.Err(); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Err() = %v, want Canceled or DeadlineExceeded", err)
					return
				}
			}
		})
	}
	wg.Wait()
	// A round after all that still lasts until its own deadline.
	c := newRoundCtx(context.Background(), time.Hour)
	defer c.end(context.Canceled)
	done := c.Done()
	time.Sleep(5 * time.Millisecond)
	select {
	case <-done:
		t.Fatalf("a round of an hour ended early: %v", c.Err())
	default:
	}
}
