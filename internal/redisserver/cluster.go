package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// CLIBinary is the redis-cli executable LaunchRedisCluster looks up on PATH
// (Debian: the redis-tools package).
const CLIBinary = "redis-cli"

// ClusterTimeout bounds how long LaunchRedisCluster waits for redis-cli
// --cluster create, and then for every node to report cluster_state:ok.
const ClusterTimeout = 30 * time.Second

// clusterArgs are the arguments of a Redis Cluster node: cluster mode,
// its node configuration file in its own directory, and a bus port of its
// own (cluster-port, Redis 7.0), free like the client port instead of
// the client port + 10000.
func clusterArgs(busPort int) []string {
	return []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-port", strconv.Itoa(busPort),
	}
}

// LaunchRedisCluster starts one Redis Cluster of masters masters, each with
// replicas replicas, as masters*(1+replicas) redis-server processes in
// cluster mode on free 127.0.0.1 ports (as Launch does, persistence
// disabled), joins them with redis-cli --cluster create, which spreads
// the 16384 slots evenly over the masters, and waits until every node
// reports cluster_state:ok and knows every other node, and every replica's
// link to its master is up (its first sync done). Which server became
// a master is redis-cli's choice: ask the cluster (CLUSTER NODES, or a
// cluster client's MasterForKey) and find the Server with ServerAt.
//
// The caller must call Stop. On error LaunchRedisCluster has already
// stopped whatever it started; the error includes redis-cli's output, or
// the last CLUSTER INFO of the node that was not ready. It needs Redis 7.0
// or later (cluster-port) and redis-cli on PATH.
func LaunchRedisCluster(ctx context.Context, masters, replicas int, opts Options) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("redisserver: a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	if replicas < 0 {
		return nil, fmt.Errorf("redisserver: %d replicas per master", replicas)
	}
	bin, err := exec.LookPath(Binary)
	if err != nil {
		return nil, fmt.Errorf("redisserver: %s not found on PATH: %w", Binary, err)
	}
	cli, err := exec.LookPath(CLIBinary)
	if err != nil {
		return nil, fmt.Errorf("redisserver: %s not found on PATH: %w", CLIBinary, err)
	}
	dir, err := os.MkdirTemp(opts.Dir, "rediscluster-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	c, err := launch(ctx, bin, dir, masters*(1+replicas), opts, true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ClusterTimeout)
	defer cancel()
	if err := c.create(ctx, cli, replicas); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if err := c.waitReplicasInSync(ctx, masters*replicas); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// ServerAt returns the server listening on addr, or nil.
func (c *Cluster) ServerAt(addr string) *Server {
	for _, s := range c.Servers {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// create runs redis-cli --cluster create over every server.
func (c *Cluster) create(ctx context.Context, cli string, replicas int) error {
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redisserver: %s --cluster create: %w\n--- output ---\n%s", cli, errors.Join(err, ctx.Err()), out)
	}
	return nil
}

// waitReady waits until every server is ready (WaitClusterReady).
func (c *Cluster) waitReady(ctx context.Context) error {
	return WaitClusterReady(ctx, c.Addrs())
}

// WaitClusterReady polls CLUSTER INFO on every node at addrs until each
// reports cluster_state:ok and knows all len(addrs) nodes, or ctx ends.
// The nodes may be processes or containers: only their addresses count.
func WaitClusterReady(ctx context.Context, addrs []string) error {
	want := strconv.Itoa(len(addrs))
	for _, addr := range addrs {
		var last string
		for {
			info, err := command(addr, time.Second, "CLUSTER", "INFO")
			if err == nil && clusterField(info, "cluster_state") == "ok" &&
				clusterField(info, "cluster_known_nodes") == want {
				break
			}
			if err != nil {
				last = err.Error()
			} else {
				last = info
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redisserver: node %s not ready: %w\n--- last CLUSTER INFO ---\n%s", addr, ctx.Err(), last)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitReplicasInSync polls INFO replication on every node until want of
// them are replicas whose link to their master is up: a replica's first
// sync ends seconds after the cluster reports ok (the master waits
// repl-diskless-sync-delay, 5 s by default, before it sends the data),
// and until then a write is on no replica (WAIT counts none).
func (c *Cluster) waitReplicasInSync(ctx context.Context, want int) error {
	for {
		var synced int
		var last string
		for _, s := range c.Servers {
			info, err := command(s.Addr(), time.Second, "INFO", "replication")
			if err != nil {
				last = err.Error()
				continue
			}
			if clusterField(info, "role") == "slave" && clusterField(info, "master_link_status") == "up" {
				synced++
			} else {
				last = info
			}
		}
		if synced >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: %d of %d replicas in sync: %w\n--- last INFO replication not in sync ---\n%s", synced, want, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterField returns the value of field in CLUSTER INFO's reply
// (or INFO's: the same "field:value" lines).
func clusterField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// command sends one command over a fresh RESP2 connection and returns its
// reply, which must be a bulk string (CLUSTER INFO's) or a simple string.
func command(addr string, timeout time.Duration, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, req.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", errors.New(line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("unexpected reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
