package goredis

import (
	"testing"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/badnode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// A node that answers garbage, in every shape, costs its vote and never
// the process: through every primitive, a Single over it fails, a Redlock
// with two healthy nodes of three succeeds, and once the clients are
// closed no goroutine is left.
func TestBadNodeNeverTakesTheProcessDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("shapes", func(t *testing.T) {
		badnode.RunRows(t, func(t *testing.T, addr string) driver.Node {
			c := redistest.Client(t, addr)
			n := adapt(t, c) // before the first connection: every one is guarded
			// Connected before the short node timeouts: the handshake is sound.
			require.NoError(t, c.Ping(t.Context()).Err())
			return n
		}, nil)
	})
}

// A node that answers the handshake (HELLO, CLIENT SETINFO...) with
// garbage too: go-redis never gets a connection, and each call fails, or
// costs that node's vote in a Redlock.
func TestRudeNodeNeverTakesTheProcessDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("shapes", func(t *testing.T) {
		badnode.RunRudeRows(t, func(t *testing.T, addr string) driver.Node {
			return adapt(t, redistest.Client(t, addr))
		}, nil)
	})
}
