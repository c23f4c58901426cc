package rueidisnode

import (
	"testing"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/badnode"
	"go.uber.org/goleak"
)

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
	badnode.HugeBulk:       "rueidis v1.0.79 itself: makeslice on a bulk length of 2^63-1 panics and wedges the pipe (Close hangs)",
	badnode.HugeArray:      "rueidis v1.0.79 itself: makeslice on an array length of 2^63-1 panics and wedges the pipe (Close hangs)",
	badnode.NegativeLength: "rueidis v1.0.79 itself: makeslice on a bulk length of -5 panics and wedges the pipe (Close hangs)",
	badnode.Unsolicited:    `rueidis v1.0.79 itself: a stale reply panics its reading goroutine ("protocol bug, message handled out of order")`,
}

// A node that answers garbage, in every shape, costs its vote and never
// the process: through every primitive, a Single over it fails, a Redlock
// with two healthy nodes of three succeeds, and once the clients are
// closed no goroutine is left.
func TestBadNodeNeverTakesTheProcessDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("shapes", func(t *testing.T) {
		badnode.RunRows(t, func(t *testing.T, addr string) driver.Node {
			// rueidis.NewClient connects: the handshake is sound.
			return serverNode(t, addr, single)
		}, rueidisBreaks)
	})
}
