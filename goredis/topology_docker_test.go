package goredis

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/internal/dockercluster"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/require"
)

// The replicated topologies of docker-compose.topologies.yml: the Redis
// Cluster and Sentinel scenarios of cluster_faults_test.go and
// sentinel_test.go, run on containers (docker kill, docker pause) instead
// of processes, and the conformance suite on both. Each test brings up a
// compose project of its own, removed when it ends; without Docker they
// skip (fail with REDLOCK_REQUIRE_DOCKER=1).

// composeFaults drives the compose cluster's containers by node address.
type composeFaults struct{ *dockercluster.RedisCluster }

func (c composeFaults) kill(t *testing.T, addr string)   { c.KillNode(t, addr) }
func (c composeFaults) pause(t *testing.T, addr string)  { c.Pause(t, c.Service(t, addr)) }
func (c composeFaults) resume(t *testing.T, addr string) { c.Unpause(t, c.Service(t, addr)) }
func (c composeFaults) running() []string                { return c.Running() }

// composeSentinel drives the compose Sentinel topology's containers.
type composeSentinel struct{ *dockercluster.Sentinel }

func startComposeSentinel(t *testing.T) sentinelFaults {
	return composeSentinel{dockercluster.StartSentinel(t)}
}
func (s composeSentinel) SentinelAddrs() []string { return s.Sentinels }
func (s composeSentinel) masterAddr() string      { return s.Master }
func (s composeSentinel) replicaAddr() string     { return s.Replica }
func (s composeSentinel) killMaster(t *testing.T) {
	s.Kill(t, dockercluster.SentinelMasterService)
}
func (s composeSentinel) pauseReplica(t *testing.T) {
	s.Pause(t, dockercluster.SentinelReplicaService)
}
func (s composeSentinel) resumeReplica(t *testing.T) {
	s.Unpause(t, dockercluster.SentinelReplicaService)
}

// TestDockerClusterFailoverReplicaHadTheKey is
// TestClusterFailoverReplicaHadTheKey on the compose cluster: the master
// owning the lock's slot is killed (docker kill) after its replica got
// the key, and the replica is promoted.
func TestDockerClusterFailoverReplicaHadTheKey(t *testing.T) {
	c := dockercluster.StartRedisCluster(t)
	clusterFailoverReplicaHadTheKey(t, newFailoverSetup(t, composeFaults{c}))
}

// TestDockerClusterFailoverLosesUnreplicatedKey is
// TestClusterFailoverLosesUnreplicatedKey on the compose cluster: the
// replica's container is paused and its link cut before the lock, the
// master killed, the replica promoted without the key.
func TestDockerClusterFailoverLosesUnreplicatedKey(t *testing.T) {
	c := dockercluster.StartRedisCluster(t)
	tuneForFailover(t, c.Addrs(), true)
	clusterFailoverLosesUnreplicatedKey(t, newFailoverSetup(t, composeFaults{c}))
}

// TestDockerSentinelFailoverWithoutReplicaAck is
// TestSentinelFailoverWithoutReplicaAck on the compose topology: the
// overlap after the master's container is killed.
func TestDockerSentinelFailoverWithoutReplicaAck(t *testing.T) {
	sentinelFailoverWithoutReplicaAck(t, startComposeSentinel)
}

// TestDockerSentinelFailoverWithReplicaAck is
// TestSentinelFailoverWithReplicaAck on the compose topology.
func TestDockerSentinelFailoverWithReplicaAck(t *testing.T) {
	sentinelFailoverWithReplicaAck(t, startComposeSentinel)
}

// TestDockerConformanceRedisCluster runs the conformance suite against
// the compose cluster as one node. Stall pauses every container; the
// node timeout is raised to 15 s (Redis's default) first, so that a
// stall never looks like a dead master.
func TestDockerConformanceRedisCluster(t *testing.T) {
	c := dockercluster.StartRedisCluster(t)
	for _, addr := range c.Addrs() {
		require.NoError(t, redistest.Client(t, addr).ConfigSet(t.Context(), "cluster-node-timeout", "15000").Err())
	}
	drivertest.Run(t, func(t *testing.T) drivertest.Target {
		return drivertest.Target{Node: adapt(t, redistest.ClusterClient(t, c.Addrs()...)), Stall: stallAll(t, c.Compose)}
	})
}

// TestDockerConformanceSentinel runs the suite against a failover client
// of the compose Sentinel topology, every granting write acknowledged by
// the replica. Stall pauses every container, sentinels first; their
// down-after period is raised to 15 s first, so that a stall starts no
// failover.
func TestDockerConformanceSentinel(t *testing.T) {
	s := dockercluster.StartSentinel(t)
	for _, addr := range s.Sentinels {
		err := redistest.Client(t, addr).Do(t.Context(), "SENTINEL", "SET", redisserver.MasterName,
			"down-after-milliseconds", "15000").Err()
		require.NoError(t, err)
	}
	drivertest.Run(t, func(t *testing.T) drivertest.Target {
		return drivertest.Target{
			Node:  failoverNode(t, composeSentinel{s}, WithReplicaAck(1, time.Second)),
			Stall: stallAll(t, s.Compose),
		}
	})
}

// stallAll returns a Stall that pauses every container of the project, in
// reverse order of their names (so sentinel1-3 before the data nodes),
// and a resume that unpauses them all.
func stallAll(t *testing.T, c *dockercluster.Compose) func() func() {
	return func() func() {
		services := c.Services()
		for i := len(services) - 1; i >= 0; i-- {
			c.Pause(t, services[i])
		}
		return func() {
			for _, s := range services {
				c.Unpause(t, s)
			}
		}
	}
}
