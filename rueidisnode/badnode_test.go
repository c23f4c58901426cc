package rueidisnode

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/badnode"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
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

// A node that answers the handshake (HELLO, CLIENT...) with garbage too:
// rueidis.NewClient, which connects, returns an error within the bound,
// for every shape, and leaves no goroutine.
func TestRudeNodeFailsTheClient(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, shape := range badnode.Shapes() {
		t.Run(shape.String(), func(t *testing.T) {
			bad := badnode.StartRude(t, shape)
			done := make(chan error, 1)
			go func() {
				c, err := rueidis.NewClient(clientOption([]string{bad.Addr()}, single))
				if err == nil {
					c.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				assert.Error(t, err)
			case <-time.After(badnode.Bound):
				t.Fatalf("rueidis.NewClient did not return within %v", badnode.Bound)
			}
		})
	}
}
