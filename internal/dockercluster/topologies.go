package dockercluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/quorumlock/redlock/internal/redisserver"
)

// topologyTimeout bounds joining the cluster, and the sentinels agreeing.
const topologyTimeout = time.Minute

// RedisCluster is the "cluster" profile of TopologiesFile: six nodes
// (services cluster1…cluster6) on the host's network, joined as three
// masters (cluster1-3) with one replica each (cluster4-6) and a node
// timeout of 1000 ms.
type RedisCluster struct {
	*Compose
	nodes []redisserver.ClusterNode // cluster1…cluster6
}

// StartRedisCluster brings the cluster profile up on free 127.0.0.1 ports
// (client and bus), joins the nodes (redisserver.JoinCluster: the image
// has no redis-cli) and waits until every node reports cluster_state:ok.
// It is removed in t.Cleanup; see Up for when it skips.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	ports := freePorts(t, 12)
	env := map[string]string{}
	c := &RedisCluster{}
	for i := 0; i < 6; i++ {
		env[fmt.Sprintf("REDLOCK_CLUSTER_PORT_%d", i+1)] = strconv.Itoa(ports[i])
		env[fmt.Sprintf("REDLOCK_CLUSTER_BUS_PORT_%d", i+1)] = strconv.Itoa(ports[6+i])
		c.nodes = append(c.nodes, redisserver.ClusterNode{Addr: loopback(ports[i]), BusPort: ports[6+i]})
	}
	c.Compose = Up(t, TopologiesFile, "cluster", env)
	for i, n := range c.nodes {
		c.waitPing(t, fmt.Sprintf("cluster%d", i+1), n.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	if err := redisserver.JoinCluster(ctx, c.nodes, 3); err != nil {
		t.Fatalf("dockercluster: joining the cluster of %s: %v", c.project, err)
	}
	return c
}

// Addrs returns the nodes' "127.0.0.1:port" addresses, cluster1 first.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Service returns the service of the node at addr.
func (c *RedisCluster) Service(t testing.TB, addr string) string {
	t.Helper()
	for i, n := range c.nodes {
		if n.Addr == addr {
			return fmt.Sprintf("cluster%d", i+1)
		}
	}
	t.Fatalf("dockercluster: no node of %s at %s", c.project, addr)
	return ""
}

// KillNode kills the node at addr (docker kill).
func (c *RedisCluster) KillNode(t testing.TB, addr string) { c.Kill(t, c.Service(t, addr)) }

// Running returns the addresses of the nodes KillNode has not killed.
func (c *RedisCluster) Running() []string {
	var addrs []string
	for i, n := range c.nodes {
		if !c.Killed(fmt.Sprintf("cluster%d", i+1)) {
			addrs = append(addrs, n.Addr)
		}
	}
	return addrs
}

// Sentinel is the "sentinel" profile of TopologiesFile: a master
// (service sentinel-master), its replica (sentinel-replica) and three
// sentinels (sentinel1-3) monitoring it as redisserver.MasterName, with
// quorum 2, down-after 1000 ms and failover timeout 3000 ms, as
// redisserver.LaunchSentinel's.
type Sentinel struct {
	*Compose
	// Master and Replica are the data nodes' addresses as started; which
	// one is the master now is the sentinels' word.
	Master, Replica string
	// Sentinels are the sentinels' addresses.
	Sentinels []string
}

// Service names of the sentinel profile's data nodes.
const (
	SentinelMasterService  = "sentinel-master"
	SentinelReplicaService = "sentinel-replica"
)

// StartSentinel brings the sentinel profile up on free 127.0.0.1 ports and
// waits until the replica is in sync and every sentinel sees the master,
// its replica and the two other sentinels (redisserver.WaitSentinelReady).
// It is removed in t.Cleanup; see Up for when it skips.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	ports := freePorts(t, 5)
	env := map[string]string{
		"REDLOCK_SENTINEL_MASTER_PORT":  strconv.Itoa(ports[0]),
		"REDLOCK_SENTINEL_REPLICA_PORT": strconv.Itoa(ports[1]),
	}
	s := &Sentinel{Master: loopback(ports[0]), Replica: loopback(ports[1])}
	for i := 0; i < 3; i++ {
		env[fmt.Sprintf("REDLOCK_SENTINEL_PORT_%d", i+1)] = strconv.Itoa(ports[2+i])
		s.Sentinels = append(s.Sentinels, loopback(ports[2+i]))
	}
	s.Compose = Up(t, TopologiesFile, "sentinel", env)
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	if err := redisserver.WaitSentinelReady(ctx, s.Sentinels, s.Master, s.Replica); err != nil {
		t.Fatalf("dockercluster: sentinel topology %s not ready: %v\n%s", s.project, err, s.logs("sentinel1"))
	}
	return s
}

// WaitFailover waits until every sentinel reports a master other than old
// (redisserver.WaitSentinelFailover) and returns its address.
func (s *Sentinel) WaitFailover(ctx context.Context, old string) (string, error) {
	return redisserver.WaitSentinelFailover(ctx, s.Sentinels, old)
}

// waitPing waits until the node at addr answers PING.
func (c *Compose) waitPing(t testing.TB, service, addr string) {
	t.Helper()
	if err := waitPing(addr, ReadyTimeout); err != nil {
		t.Fatalf("dockercluster: %s (%s) not ready: %v\n%s", service, addr, err, c.logs(service))
	}
}

// freePorts returns n distinct free 127.0.0.1 ports below the kernel's
// ephemeral range (freeport.Stable): a service stopped and started again
// binds its port anew.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		p, err := freeport.Stable()
		if err != nil {
			t.Fatalf("dockercluster: %v", err)
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
