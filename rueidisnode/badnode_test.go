package rueidisnode

import (
	"testing"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/badnode"
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
			// rueidis.NewClient connects: the handshake is sound.
			// The client is guarded (clientOption): without Guard, four
			// shapes end the process or hang Close (see Guard).
			return serverNode(t, addr, single)
		}, nil)
	})
}
