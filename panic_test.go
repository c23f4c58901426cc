package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
)

// A node whose adapter panics (a client library reading garbage: go-redis
// panics on a bulk length of 2^63-1) costs its vote, not the process: the
// round's goroutines recover it as that node's error.
func TestNodePanicIsTheNodesError(t *testing.T) {
	_, bs := minis(t, 3)
	nodes, fakes := fakenode.WrapAll(bs)
	fakes[0].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		panic("makeslice: len out of range")
	})
	ctx := context.Background()

	r, err := redlock.New(nodes, redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		t.Fatal(err)
	}
	lock, err := r.Lock(ctx, "order:1")
	if err != nil {
		t.Fatalf("two healthy nodes of three: Lock = %v, want the lock", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("Unlock = %v", err)
	}

	s, err := redlock.NewSingle(nodes[0], redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Lock(ctx, "order:2")
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrUnavailable) {
		t.Fatalf("Single over a panicking node: Lock = %v, want a QuorumError matching ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), "makeslice") {
		t.Errorf("error %q does not say the node call panicked, and with what", err)
	}
}
