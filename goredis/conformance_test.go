package goredis

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/backendtest"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
)

// TestConformanceMiniredis runs the backend conformance suite against the
// adapter over a fresh miniredis per check, behind a fault proxy: the
// node's clock moves only by Elapse, and Stall holds the proxy's traffic.
func TestConformanceMiniredis(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		m := miniredis.RunT(t)
		p, err := faultproxy.New(m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return backendtest.Target{
			Backend: backend(t, redistest.Client(t, p.Addr())),
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
// real time, stalled with SIGSTOP: over the node's own connection, and
// WithClientPool over the go-redis client's.
func TestConformanceRedisServer(t *testing.T) {
	s := redistest.Start(t, 1).Servers[0]
	t.Run("Own", func(t *testing.T) { serverConformance(t, s) })
	t.Run("ClientPool", func(t *testing.T) { serverConformance(t, s, WithClientPool()) })
}

func serverConformance(t *testing.T, s *redisserver.Server, opts ...Option) {
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		return backendtest.Target{
			Backend: backend(t, redistest.Client(t, s.Addr()), opts...),
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

// TestConformanceRedisCluster runs the suite against the adapter over a
// Redis Cluster of three masters with a replica each, shared by every
// check, as one node. The suite's keys carry hash tags of random text, so
// its checks land on every master. Stall pauses every server of the
// cluster (SIGSTOP): the node, the whole cluster, stops answering, for
// far less than the cluster's node timeout (15 s), so no replica takes
// over. ReplicaAck runs it again with every granting write acknowledged
// by the slot's replica: a grant then returns a replica's round trip
// after the key's TTL started, so its expiry checks get a longer TTL.
func TestConformanceRedisCluster(t *testing.T) {
	t.Run("Plain", func(t *testing.T) { clusterConformance(t, 0) })
	t.Run("ReplicaAck", func(t *testing.T) {
		clusterConformance(t, 300*time.Millisecond, WithReplicaAck(1, time.Second))
	})
}

func clusterConformance(t *testing.T, ttl time.Duration, opts ...Option) {
	cl := redisCluster(t)
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		b, _ := clusterBackend(t, opts...)
		return backendtest.Target{
			Backend: b,
			TTL:     ttl,
			Stall: func() func() {
				for _, s := range cl.Servers {
					if err := s.Pause(); err != nil {
						t.Fatal(err)
					}
				}
				return func() {
					for _, s := range cl.Servers {
						if err := s.Resume(); err != nil {
							t.Error(err)
						}
					}
				}
			},
		}
	})
}
