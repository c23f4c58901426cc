package rueidisnode

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/backendtest"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/rueidis"
)

// TestConformanceMiniredis runs the backend conformance suite against the
// adapter over a fresh miniredis per check, behind a fault proxy: the
// node's clock moves only by Elapse, and Stall holds the proxy's traffic.
// miniredis answers CLUSTER SLOTS as a one-node cluster, so the client is
// made with ForceSingleClient.
func TestConformanceMiniredis(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		m := miniredis.RunT(t)
		p, err := faultproxy.New(m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return backendtest.Target{
			Backend: adapt(t, client(t, p.Addr(), single)),
			Elapse:  m.FastForward,
			Stall: func() func() {
				p.Set(faultproxy.Fault{Kind: faultproxy.Stall})
				return func() { p.Set(faultproxy.Fault{Kind: faultproxy.Pass}) }
			},
		}
	})
}

// TestConformanceRedisServer runs the suite against the adapter over one
// real redis-server shared by every check (each uses keys of its own), on
// real time, stalled with SIGSTOP: with rueidis's defaults (RESP3), and
// with AlwaysRESP2, where rueidis puts pub/sub on a connection of its own.
func TestConformanceRedisServer(t *testing.T) {
	s := redistest.Start(t, 1).Servers[0]
	t.Run("RESP3", func(t *testing.T) { conformanceOn(t, s) })
	t.Run("RESP2", func(t *testing.T) {
		conformanceOn(t, s, func(o *rueidis.ClientOption) { o.AlwaysRESP2 = true })
	})
}

func conformanceOn(t *testing.T, s *redisserver.Server, change ...func(*rueidis.ClientOption)) {
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		return backendtest.Target{
			Backend: adapt(t, client(t, s.Addr(), change...)),
			Stall: func() func() {
				if err := s.Pause(); err != nil {
					t.Fatal(err)
				}
				return func() {
					if err := s.Resume(); err != nil {
						t.Error(err)
					}
				}
			},
		}
	})
}
