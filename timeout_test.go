package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
)

// A node that does not answer in time is named with the deadline it
// missed: the per-node timeout, or the caller's when that came first. The
// node's error still matches context.DeadlineExceeded.
func TestTimeoutNamesTheDeadline(t *testing.T) {
	_, bs := minis(t, 1)
	nodes, fakes := fakenode.WrapAll(bs)
	fakes[0].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		<-ctx.Done() // a node that hangs
		return fakenode.Result{Err: ctx.Err()}
	})
	l, err := redlock.NewSingle(nodes[0], redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}

	_, err = l.Lock(context.Background(), "k")
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrUnavailable) || !errors.As(err, &qe) || len(qe.Failed) != 1 || !errors.Is(qe.Failed[0].Err, context.DeadlineExceeded) {
		t.Fatalf("Lock = %v, want ErrUnavailable, the node's error matching context.DeadlineExceeded", err)
	}
	if want := nodes[0].Info().Name + ": no answer within the node timeout (50ms): context deadline exceeded"; !strings.Contains(err.Error(), want) {
		t.Errorf("Lock = %q, want it to contain %q", err, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = l.Lock(ctx, "k")
	if want := "no answer before the caller's deadline: context deadline exceeded"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Lock with a 20ms context = %v, want it to contain %q", err, want)
	}
}
