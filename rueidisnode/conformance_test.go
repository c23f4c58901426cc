package rueidisnode

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/internal/redistest"
)

// The adapter passes the conformance suite over miniredis, over three
// redis-servers (paused to stall), and below over a Redis Cluster and a
// master behind Sentinel (TestCluster, TestSentinel).
func TestConformance(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		srv := miniredis.RunT(t)
		drivertest.Run(t, func(t *testing.T) drivertest.Target {
			return drivertest.Target{Node: serverNode(t, srv.Addr(), single), Elapse: srv.FastForward}
		})
	})
	t.Run("servers", func(t *testing.T) {
		c := redistest.Start(t, 3)
		i := 0
		drivertest.Run(t, func(t *testing.T) drivertest.Target {
			s := c.Servers[i%3]
			i++
			return drivertest.Target{Node: serverNode(t, s.Addr()), Stall: func() func() {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
				return func() {
					if err := s.Resume(); err != nil {
						t.Fatal(err)
					}
				}
			}}
		})
	})
}
