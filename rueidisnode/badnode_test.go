package rueidisnode

import (
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/badnode"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// badNodeTimeout is the per-node timeout of the lockers over a bad node:
// short, since a silent node costs it on every round.
const badNodeTimeout = 150 * time.Millisecond

// badNodeBound bounds one primitive's calls over a bad node.
const badNodeBound = 5 * time.Second

// bounded runs f, failing t if it takes longer than badNodeBound.
func bounded(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(badNodeBound):
		t.Fatalf("%s did not return within %v", what, badNodeBound)
		return nil
	}
}

// rueidisBreaks are the shapes that break rueidis itself, where no
// adapter can help: its reader makes a slice of the length it reads
// (make([]byte, n) in readB, make([]RedisMessage, n) in readA) and panics
// on a length out of range. On the caller's goroutine the core recovers
// the panic, but the connection's pipe is left waiting forever: every
// later call and the client's Close hang. On rueidis's reading goroutine
// the panic ends the process, as does its check that replies match
// commands (a stale reply: "protocol bug, message handled out of order",
// pipe.go _backgroundRead).
var rueidisBreaks = map[badnode.Shape]string{
	badnode.HugeBulk:       "makeslice on a bulk length of 2^63-1 panics and wedges the pipe (Close hangs)",
	badnode.HugeArray:      "makeslice on an array length of 2^63-1 panics and wedges the pipe (Close hangs)",
	badnode.NegativeLength: "makeslice on a bulk length of -5 panics and wedges the pipe (Close hangs)",
	badnode.Unsolicited:    `a stale reply panics its reading goroutine ("protocol bug, message handled out of order")`,
}

// A node that answers garbage, in every shape, costs its vote and never
// the process: through every primitive, a Single over it fails, a Redlock
// with two healthy nodes of three succeeds, and once the clients are
// closed no goroutine is left.
func TestBadNodeNeverTakesTheProcessDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("shapes", func(t *testing.T) {
		// The rows mostly wait out node timeouts: eight at a time, where
		// t.Parallel would run GOMAXPROCS of them, and all at once would
		// miss the node timeout on a loaded machine.
		var wg sync.WaitGroup
		defer wg.Wait()
		slots := make(chan struct{}, 8)
		for _, shape := range badnode.Shapes() {
			for _, quorum := range []bool{false, true} {
				name := shape.String() + "/Single"
				if quorum {
					name = shape.String() + "/Redlock"
				}
				wg.Go(func() {
					slots <- struct{}{}
					defer func() { <-slots }()
					t.Run(name, func(t *testing.T) { badNodeRows(t, shape, quorum) })
				})
			}
		}
	})
}

// badNodeRows runs every primitive over a bad node answering shape: over
// a Single of it, each must fail; over a Redlock of it and two miniredis
// (quorum), each must succeed.
func badNodeRows(t *testing.T, shape badnode.Shape, quorum bool) {
	if why, ok := rueidisBreaks[shape]; ok {
		t.Skipf("rueidis v1.0.79 itself: %s; out of the adapter's reach", why)
	}
	bad := badnode.Start(t, shape)
	addrs := []string{bad.Addr()}
	if quorum {
		addrs = append(addrs, miniredis.RunT(t).Addr(), miniredis.RunT(t).Addr())
	}
	nodes := make([]driver.Node, len(addrs))
	for i, addr := range addrs {
		// rueidis.NewClient connects: the handshake is sound.
		nodes[i] = serverNode(t, addr, single)
	}
	r := newRedlock(t, nodes, redlock.WithNodeTimeout(badNodeTimeout), redlock.WithStrategy(redlock.Reject()))
	for _, op := range badnode.Primitives {
		before := bad.Commands()
		err := bounded(t, op.Name, func() error { return op.Use(t.Context(), r, fresh("bad")) })
		if quorum {
			require.NoError(t, err, "%s with one bad node of three", op.Name)
		} else {
			require.Error(t, err, "%s over a bad node alone", op.Name)
		}
		require.Greater(t, bad.Commands(), before, "%s reached the bad node", op.Name)
	}
}
