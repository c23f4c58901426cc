package redlock_test

// The fault suite on five Redis containers (internal/dockercluster), each
// on its own network, reached only through its port published on
// 127.0.0.1. It runs the scenarios of faults_test.go with docker kill,
// docker pause and docker start, plus the faults only containers allow:
// cutting a master off its network, and latency (through the node's
// in-process forwarder, since the kernel here has no sch_netem).
//
// Without a Docker engine or the image (scripts/redis-image.sh) every test
// skips; REDLOCK_REQUIRE_DOCKER=1 (set by .ci/run when an engine answers)
// turns the skip into a failure.

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/dockercluster"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultContainers starts five containers. Clients use the published ports;
// after every start or reconnect the port is re-read and must be the one
// the clients already use.
func faultContainers(t *testing.T) (*faultCluster, *dockercluster.Cluster) {
	c := dockercluster.Start(t, 5)
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.DockerAddr()
	}
	samePort := func(t *testing.T, i int) {
		t.Helper()
		require.Equal(t, addrs[i], c.Nodes[i].DockerAddr(), "node %d's published port moved; clients would be stale", i)
	}
	return &faultCluster{
		addrs: addrs,
		// A round trip goes through docker-proxy; a paused container costs
		// this much per call.
		nodeTimeout: 300 * time.Millisecond,
		// Killing and restarting three containers, and go-redis noticing
		// (its redial probe runs once a second), took 4.5 s here; the
		// immediate-restart case must fit inside one TTL with room to spare.
		restartTTL: 12 * time.Second,
		kill:       func(t *testing.T, i int) { c.Nodes[i].Kill(t) },
		start:      func(t *testing.T, i int) { c.Nodes[i].Start(t); samePort(t, i) },
		pause:      func(t *testing.T, i int) { c.Nodes[i].Pause(t) },
		resume:     func(t *testing.T, i int) { c.Nodes[i].Unpause(t) },
		proxied:    c.Addrs(),
		delay:      func(i int, d time.Duration) { c.Nodes[i].AddLatency(t, d) },
	}, c
}

// TestDockerFaults runs every fault scenario on five Redis containers,
// each on a fresh cluster.
func TestDockerFaults(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, *faultCluster, *dockercluster.Cluster)
	}{
		{"KillOneThenTwo", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultKillOneThenTwo(t, fc) }},
		{"KillThree", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultKillThree(t, fc) }},
		{"PauseMidAcquisition", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultPauseMidAcquisition(t, fc) }},
		{"RestartDelayed", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultRestartDelayed(t, fc) }},
		{"RestartImmediate", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultRestartImmediate(t, fc) }},
		{"NetworkDisconnect", func(t *testing.T, fc *faultCluster, c *dockercluster.Cluster) {
			faultNetworkCut(t, fc, "docker network disconnect", c.Nodes[0].Disconnect, c.Nodes[0].Reconnect)
		}},
		{"NetworkPartition", func(t *testing.T, fc *faultCluster, c *dockercluster.Cluster) {
			faultNetworkCut(t, fc, "partition (iptables DROP)", c.Nodes[0].Partition, c.Nodes[0].Heal)
		}},
		{"Latency", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultLatency(t, fc) }},
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			fc, c := faultContainers(t)
			s.run(t, fc, c)
		})
	}
}

// TestExternalCluster checks mutual exclusion on masters started outside
// the test, such as the compose cluster:
//
//	scripts/redis-image.sh && docker-compose -f docker-compose.cluster.yml up -d
//	REDLOCK_CLUSTER_ADDRS=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005 \
//		go test -race -run TestExternalCluster -v .
//
// Stop masters meanwhile (docker-compose kill redis1 redis2) to watch the
// quorum at work. It skips when REDLOCK_CLUSTER_ADDRS is not set.
func TestExternalCluster(t *testing.T) {
	env := os.Getenv("REDLOCK_CLUSTER_ADDRS")
	if env == "" {
		t.Skip("set REDLOCK_CLUSTER_ADDRS=host:port,... to run against running masters")
	}
	addrs := strings.Split(env, ",")
	fc := &faultCluster{addrs: addrs, nodeTimeout: 300 * time.Millisecond}
	lk := fc.locker(t, fc.backends(t), redlock.WithTTL(2*time.Second))
	chk := exclusion.New()
	key := "external-" + time.Now().Format("150405.000000")
	c := faultContend(t, lk, chk, key, 4)
	c.waitAcquisitions(t, 50, "acquisitions on the external cluster")
	c.Stop()
	st := chk.Verify(t, "external cluster "+env)
	assert.Positive(t, st.Acquisitions)
}
