package redisserver

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// ClusterNode is a node JoinCluster joins: its client address
// ("127.0.0.1:port") and its cluster bus port (cluster-port).
type ClusterNode struct {
	Addr    string
	BusPort int
}

// JoinCluster makes one Redis Cluster of fresh cluster-mode nodes with the
// server's own commands, for hosts without redis-cli (such as the Docker
// image): the first masters nodes are masters, each given a config epoch
// of its own and an even share of the slots (CLUSTER SET-CONFIG-EPOCH,
// ADDSLOTSRANGE); every other node meets the first (CLUSTER MEET with its
// bus port); the remaining nodes become replicas of the masters in turn
// (CLUSTER REPLICATE, retried until gossip has told the replica about its
// master). It then waits as WaitClusterReady does, and until every node
// lists every replica (CLUSTER NODES), so that CLUSTER SLOTS names them.
// Every step is bounded by ctx.
func JoinCluster(ctx context.Context, nodes []ClusterNode, masters int) error {
	if masters < 3 || masters > len(nodes) {
		return fmt.Errorf("redisserver: %d masters among %d nodes", masters, len(nodes))
	}
	ids := make([]string, masters)
	for i := 0; i < masters; i++ {
		first, last := i*ClusterSlots/masters, (i+1)*ClusterSlots/masters-1
		if err := send(nodes[i].Addr, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
		if err := send(nodes[i].Addr, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return err
		}
		id, err := command(nodes[i].Addr, time.Second, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("redisserver: CLUSTER MYID on %s: %w", nodes[i].Addr, err)
		}
		ids[i] = id
	}
	host, port, err := net.SplitHostPort(nodes[0].Addr)
	if err != nil {
		return fmt.Errorf("redisserver: %w", err)
	}
	for _, n := range nodes[1:] {
		if err := send(n.Addr, "CLUSTER", "MEET", host, port, strconv.Itoa(nodes[0].BusPort)); err != nil {
			return err
		}
	}
	for j, n := range nodes[masters:] {
		if err := replicate(ctx, n.Addr, ids[j%masters]); err != nil {
			return err
		}
	}
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	if err := WaitClusterReady(ctx, addrs); err != nil {
		return err
	}
	return waitReplicasKnown(ctx, addrs, len(nodes)-masters)
}

// waitReplicasKnown waits until every node at addrs lists replicas
// replicas in CLUSTER NODES.
func waitReplicasKnown(ctx context.Context, addrs []string, replicas int) error {
	for _, addr := range addrs {
		for {
			nodes, err := command(addr, time.Second, "CLUSTER", "NODES")
			n := 0
			for line := range strings.Lines(nodes) {
				if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "slave") && f[3] != "-" {
					n++
				}
			}
			if err == nil && n == replicas {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redisserver: %s lists %d of %d replicas: %w (%v)\n%s", addr, n, replicas, ctx.Err(), err, nodes)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// send sends one command that must succeed.
func send(addr string, args ...string) error {
	if _, err := command(addr, time.Second, args...); err != nil {
		return fmt.Errorf("redisserver: %v on %s: %w", args, addr, err)
	}
	return nil
}

// replicate makes the node at addr a replica of the node masterID, trying
// again until the node knows that master (gossip after MEET) or ctx ends.
func replicate(ctx context.Context, addr, masterID string) error {
	for {
		_, err := command(addr, time.Second, "CLUSTER", "REPLICATE", masterID)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: CLUSTER REPLICATE %s on %s: %w (last: %v)", masterID, addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
