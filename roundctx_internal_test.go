package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

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
