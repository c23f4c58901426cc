package goredis

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
)

// TestConformance runs the conformance suite of package driver against
// the adapter: over miniredis behind a fault proxy (the node's clock moves
// only by Elapse, and Stall holds the proxy's traffic), and over three
// redis-servers, paused (SIGSTOP) to stall. The Redis Cluster and Sentinel
// runs are TestConformanceCluster and TestConformanceSentinel.
func TestConformance(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		p, err := faultproxy.New(m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		drivertest.Run(t, func(t *testing.T) drivertest.Target {
			return drivertest.Target{
				Node:   adapt(t, redistest.Client(t, p.Addr())),
				Elapse: m.FastForward,
				Stall: func() func() {
					p.Set(faultproxy.Fault{Kind: faultproxy.Stall})
					return func() { p.Set(faultproxy.Fault{Kind: faultproxy.Pass}) }
				},
			}
		})
	})
	t.Run("servers", func(t *testing.T) {
		c := redistest.Start(t, 3)
		i := 0
		drivertest.Run(t, func(t *testing.T) drivertest.Target {
			s := c.Servers[i%3]
			i++
			return drivertest.Target{Node: adapt(t, redistest.Client(t, s.Addr())), Stall: pause(t, s)}
		})
	})
}

// pause returns a Stall that pauses servers (SIGSTOP), in order, and a
// resume that resumes them all.
func pause(t *testing.T, servers ...*redisserver.Server) func() func() {
	return func() func() {
		for _, s := range servers {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		return func() {
			for _, s := range servers {
				if err := s.Resume(); err != nil {
					t.Error(err)
				}
			}
		}
	}
}

// TestConformanceCluster runs the suite against the adapter over a Redis
// Cluster of three masters with a replica each, shared by every check, as
// one node. The suite's keys carry hash tags of random text, so its
// checks land on every master. Stall pauses every server of the cluster:
// the node, the whole cluster, stops answering, for far less than the
// cluster's node timeout (15 s), so no replica takes over. ReplicaAck
// runs it again with every script call acknowledged by the slot's
// replica.
func TestConformanceCluster(t *testing.T) {
	cl := redisCluster(t)
	for name, opts := range map[string][]Option{
		"Plain":      nil,
		"ReplicaAck": {WithReplicaAck(1, time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			drivertest.Run(t, func(t *testing.T) drivertest.Target {
				n, _ := clusterNode(t, opts...)
				return drivertest.Target{Node: n, Stall: pause(t, cl.Servers...)}
			})
		})
	}
}
