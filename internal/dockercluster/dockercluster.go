// Package dockercluster runs independent Redis containers for fault-injection
// tests (kill, pause, network cut, partition, latency) using dockertest.
// It also brings up the replicated topologies of docker-compose.topologies.yml
// (compose.go, topologies.go: StartRedisCluster, StartSentinel) as compose
// projects on the host's network; what follows is about Start's containers.
//
// Every node is a container from the local image (REDLOCK_REDIS_IMAGE, default
// "redlock-redis:7", built by scripts/redis-image.sh) attached to its own
// user-defined bridge network and publishing 6379 on 127.0.0.1 only (the host
// port is picked once and pinned, so it survives Kill/Start and
// Disconnect/Reconnect). Container IPs are never used.
//
// Clients should use Node.Addr: an in-process TCP forwarder on 127.0.0.1 in
// front of the published port (Node.DockerAddr), an internal/faultproxy that
// dials the port as last read from Docker for every new connection.
// It never changes address and implements AddLatency: the development VM's kernel has no sch_netem, so
// "tc qdisc ... netem delay" fails with "Specified qdisc kind is unknown" and
// the delay is injected in user space instead, on new and open connections.
//
// Host requirements: a Docker engine reachable through the usual DOCKER_HOST /
// unix socket; for Partition/Heal also root plus nsenter (util-linux) and
// iptables (Debian package iptables) on the host, run inside the container's
// network namespace (they are not in the image).
//
// Client-visible semantics, measured on Docker 20.10 with the default
// userland proxy (docker-proxy), through Addr (DockerAddr in brackets):
//
//   - Kill: docker kill (SIGKILL); Docker also stops docker-proxy. An open
//     connection gets EOF; a new one is accepted by the forwarder and reset at
//     once (DockerAddr: connection refused). Start brings back an empty Redis.
//   - Pause: docker pause (cgroup freezer). Connecting works, commands hang.
//   - Disconnect: docker network disconnect. Docker removes the port mapping
//     and stops docker-proxy, so this fails fast exactly like Kill (open
//     connection EOF, new one reset / refused), but Redis keeps running with
//     its data and its keys keep expiring. (Not checked with the userland
//     proxy disabled, where open connections might hang instead.)
//   - Partition: iptables DROP for tcp/6379 inside the container's network
//     namespace. New connections are still accepted (by docker-proxy) and
//     every command hangs, on open connections too: packets vanish. After
//     Heal, TCP retransmission delivers what was queued, so late commands may
//     still execute.
//   - AddLatency(d): every reply reaches the client d later, so each round
//     trip grows by d. It stays in effect across Kill/Start etc. until
//     ClearLatency.
package dockercluster

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/quorumlock/redlock/internal/testenv"
)

const (
	// ImageEnv names the image to run; DefaultImage is used when it is empty.
	ImageEnv     = "REDLOCK_REDIS_IMAGE"
	DefaultImage = "redlock-redis:7"
	// Label is set (value "1") on every container and network created here, so
	// leftovers can be removed with `docker rm -f $(docker ps -aq --filter label=redlock.dockercluster)`.
	Label = "redlock.dockercluster"

	redisPort = dc.Port("6379/tcp")
	// ReadyTimeout bounds waiting for a node to answer PING.
	ReadyTimeout = 15 * time.Second
)

// redisCmd works with redlock-redis:7 (ENTRYPOINT redis-server) and with the
// official image (its entrypoint prepends redis-server to flag arguments).
var redisCmd = []string{"--protected-mode", "no", "--save", "", "--appendonly", "no"}

// Image returns the image Start runs.
func Image() string {
	if img := os.Getenv(ImageEnv); img != "" {
		return img
	}
	return DefaultImage
}

// Cluster is a set of independent Redis containers.
type Cluster struct {
	Nodes []*Node
}

// Addrs returns the current "127.0.0.1:port" of every node, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Node is one Redis container on its own network.
type Node struct {
	pool    *dockertest.Pool
	id      string // container ID
	name    string // container name
	network *dockertest.Network

	proxy *faultproxy.Proxy

	mu         sync.Mutex
	dockerAddr string
	paused     bool
}

// Start runs n Redis containers, each on a fresh network, and waits until each
// answers PING through 127.0.0.1. It skips (or fails, with
// REDLOCK_REQUIRE_DOCKER=1: see internal/testenv) when no Docker engine
// answers or the image is missing. Containers and networks are removed in t.Cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	pool := engine(t)
	repo, tag := splitImage(Image())

	prefix := "redlock-test-" + randomHex(4)
	c := &Cluster{}
	t.Cleanup(func() {
		for _, node := range c.Nodes {
			node.remove(t)
		}
	})
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i+1)
		network, err := pool.CreateNetwork(name, func(o *dc.CreateNetworkOptions) {
			o.Labels = map[string]string{Label: "1"}
		})
		if err != nil {
			t.Fatalf("dockercluster: creating network %s: %v", name, err)
		}
		node := &Node{pool: pool, name: name, network: network}
		c.Nodes = append(c.Nodes, node)
		if node.proxy, err = faultproxy.NewFunc(node.DockerAddr); err != nil {
			t.Fatalf("dockercluster: starting forwarder: %v", err)
		}
		if err := node.create(repo, tag); err != nil {
			t.Fatalf("dockercluster: starting node %d: %v", i+1, err)
		}
	}
	for i, node := range c.Nodes {
		if err := waitPing(node.DockerAddr(), ReadyTimeout); err != nil {
			t.Fatalf("dockercluster: node %d (%s) not ready: %v\n%s", i+1, node.DockerAddr(), err, node.logs())
		}
	}
	return c
}

// engine returns a client of the Docker engine, once it answered and holds
// the image; it skips or fails the test (internal/testenv) otherwise.
func engine(t testing.TB) *dockertest.Pool {
	t.Helper()
	pool, err := dockertest.NewPool("")
	if err != nil {
		testenv.SkipOrFail(t, testenv.Docker, "dockercluster: cannot create a Docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = pool.Client.PingWithContext(ctx)
	cancel()
	if err != nil {
		testenv.SkipOrFail(t, testenv.Docker, "dockercluster: no Docker engine answers: %v", err)
	}
	image := Image()
	if _, err := pool.Client.InspectImage(image); err != nil {
		testenv.SkipOrFail(t, testenv.Docker, "dockercluster: image %s not available locally (%v); build it with scripts/redis-image.sh (nothing is pulled)", image, err)
	}
	return pool
}

// create runs the container. The host port is picked here (a free 127.0.0.1
// port below the kernel's ephemeral range, freeport.Stable, so that no
// outgoing connection takes it while the container is stopped) rather
// than left to Docker, so that it survives Kill/Start and
// Disconnect/Reconnect; if Docker cannot bind it we retry with another one.
func (n *Node) create(repo, tag string) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freeport.Stable()
		if err != nil {
			return err
		}
		res, err := n.pool.RunWithOptions(&dockertest.RunOptions{
			Name:       n.name,
			Repository: repo,
			Tag:        tag,
			Cmd:        redisCmd,
			Networks:   []*dockertest.Network{n.network},
			Labels:     map[string]string{Label: "1"},
			PortBindings: map[dc.Port][]dc.PortBinding{
				redisPort: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}},
			},
		}, func(hc *dc.HostConfig) {
			hc.PublishAllPorts = false
			hc.NetworkMode = n.network.Network.Name
			hc.AutoRemove = false
			hc.RestartPolicy = dc.RestartPolicy{Name: "no"}
		})
		if err == nil {
			n.id = res.Container.ID
			return n.refreshAddr()
		}
		lastErr = err
		// A half-created container keeps the name; remove it before retrying.
		_ = n.pool.RemoveContainerByName(n.name)
	}
	return lastErr
}

// Addr returns the "127.0.0.1:port" clients should use: the node's forwarder,
// whose address never changes and which applies AddLatency.
func (n *Node) Addr() string { return n.proxy.Addr() }

// DockerAddr returns the container's published "127.0.0.1:port" as last read
// from Docker (re-read by Start and Reconnect). It bypasses the forwarder, so
// AddLatency does not apply to it.
func (n *Node) DockerAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dockerAddr
}

// ID returns the container ID.
func (n *Node) ID() string { return n.id }

func (n *Node) refreshAddr() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := n.pool.Client.InspectContainer(n.id)
		if err != nil {
			return err
		}
		for _, b := range c.NetworkSettings.Ports[redisPort] {
			if b.HostPort != "" {
				n.mu.Lock()
				n.dockerAddr = net.JoinHostPort("127.0.0.1", b.HostPort)
				n.mu.Unlock()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s publishes no host port for %s", n.name, redisPort)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL (docker kill) and waits until Docker reports the
// container stopped. A paused container is unpaused first.
func (n *Node) Kill(t testing.TB) {
	t.Helper()
	n.unpauseIfPaused()
	err := n.pool.Client.KillContainer(dc.KillContainerOptions{ID: n.id, Signal: dc.SIGKILL})
	var notRunning *dc.ContainerNotRunning
	if err != nil && !errors.As(err, &notRunning) {
		t.Fatalf("dockercluster: kill %s: %v", n.name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := n.pool.Client.InspectContainer(n.id)
		if err != nil {
			t.Fatalf("dockercluster: inspect %s: %v", n.name, err)
		}
		if !c.State.Running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockercluster: %s still running 10s after SIGKILL", n.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Start starts the container again after Kill, re-reads its published port
// and waits for PING. The dataset is empty (no persistence).
func (n *Node) Start(t testing.TB) {
	t.Helper()
	if err := n.pool.Client.StartContainer(n.id, nil); err != nil {
		var already *dc.ContainerAlreadyRunning
		if !errors.As(err, &already) {
			t.Fatalf("dockercluster: start %s: %v", n.name, err)
		}
	}
	n.waitReady(t)
}

// Pause freezes the container (docker pause).
func (n *Node) Pause(t testing.TB) {
	t.Helper()
	if err := pause(n.pool.Client, n.id); err != nil {
		t.Fatalf("dockercluster: pause %s: %v", n.name, err)
	}
	n.mu.Lock()
	n.paused = true
	n.mu.Unlock()
}

// Unpause thaws a paused container.
func (n *Node) Unpause(t testing.TB) {
	t.Helper()
	if err := n.pool.Client.UnpauseContainer(n.id); err != nil {
		t.Fatalf("dockercluster: unpause %s: %v", n.name, err)
	}
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
}

func (n *Node) unpauseIfPaused() {
	n.mu.Lock()
	paused := n.paused
	n.paused = false
	n.mu.Unlock()
	if paused {
		_ = n.pool.Client.UnpauseContainer(n.id)
	}
}

// Disconnect detaches the container from its network (docker network
// disconnect). With docker-proxy (the default) open client connections get
// EOF and new ones are refused; Redis itself keeps running with its data.
// See the package comment, and Partition for a cut where packets are dropped.
func (n *Node) Disconnect(t testing.TB) {
	t.Helper()
	err := n.pool.Client.DisconnectNetwork(n.network.Network.ID, dc.NetworkConnectionOptions{Container: n.id, Force: true})
	if err != nil {
		t.Fatalf("dockercluster: disconnect %s: %v", n.name, err)
	}
}

// Reconnect attaches the container to its network again (the port mapping is
// restored on the same host port), re-reads the address and waits for PING.
func (n *Node) Reconnect(t testing.TB) {
	t.Helper()
	err := n.pool.Client.ConnectNetwork(n.network.Network.ID, dc.NetworkConnectionOptions{Container: n.id})
	if err != nil {
		t.Fatalf("dockercluster: reconnect %s: %v", n.name, err)
	}
	n.waitReady(t)
}

// Partition drops every packet to tcp/6379 inside the container's network
// namespace (iptables DROP via nsenter): clients hang instead of failing fast.
// Needs root, nsenter and iptables on the host. The rule lives in the
// container's network namespace, which Docker recreates on Kill/Start, so a
// restarted node is no longer partitioned.
func (n *Node) Partition(t testing.TB) {
	t.Helper()
	n.nsenter(t, "iptables", "-w", "-I", "INPUT", "-p", "tcp", "--dport", "6379", "-j", "DROP")
}

// Heal removes the rule added by Partition. It is a no-op if there is none.
func (n *Node) Heal(t testing.TB) {
	t.Helper()
	rule := []string{"INPUT", "-p", "tcp", "--dport", "6379", "-j", "DROP"}
	for {
		if _, err := n.nsenterOutput(t, "iptables", append([]string{"-w", "-C"}, rule...)...); err != nil {
			return // rule not present
		}
		n.nsenter(t, "iptables", append([]string{"-w", "-D"}, rule...)...)
	}
}

// AddLatency delays every reply to clients connected through Addr by d
// (replacing any previous delay), on open and new connections.
func (n *Node) AddLatency(t testing.TB, d time.Duration) {
	t.Helper()
	n.proxy.Set(faultproxy.Fault{Kind: faultproxy.Late, ReplyDelay: d})
}

// ClearLatency removes the delay added by AddLatency. Replies already on
// their way keep theirs, as packets in flight would.
func (n *Node) ClearLatency(t testing.TB) {
	t.Helper()
	n.proxy.Set(faultproxy.Fault{})
}

// nsenter runs a host tool inside the container's network namespace and fails
// the test if it fails.
func (n *Node) nsenter(t testing.TB, tool string, args ...string) {
	t.Helper()
	if out, err := n.nsenterOutput(t, tool, args...); err != nil {
		t.Fatalf("dockercluster: %s %s in %s: %v\n%s", tool, strings.Join(args, " "), n.name, err, out)
	}
}

func (n *Node) nsenterOutput(t testing.TB, tool string, args ...string) (string, error) {
	t.Helper()
	for _, bin := range []string{"nsenter", tool} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.SkipOrFail(t, testenv.Docker, "dockercluster: %s not found on the host (Debian: apt-get install util-linux iptables)", bin)
		}
	}
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, testenv.Docker, "dockercluster: %s in a container's network namespace needs root (nsenter)", tool)
	}
	c, err := n.pool.Client.InspectContainer(n.id)
	if err != nil {
		t.Fatalf("dockercluster: inspect %s: %v", n.name, err)
	}
	if c.State.Pid == 0 {
		t.Fatalf("dockercluster: %s is not running", n.name)
	}
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(c.State.Pid), "-n", tool}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitReady re-reads the published port and waits for PING.
func (n *Node) waitReady(t testing.TB) {
	t.Helper()
	if err := n.refreshAddr(); err != nil {
		t.Fatalf("dockercluster: %v", err)
	}
	if err := waitPing(n.DockerAddr(), ReadyTimeout); err != nil {
		t.Fatalf("dockercluster: %s (%s) not ready: %v\n%s", n.name, n.DockerAddr(), err, n.logs())
	}
}

// logs returns the tail of the container's output, for failure messages.
func (n *Node) logs() string {
	var sb strings.Builder
	err := n.pool.Client.Logs(dc.LogsOptions{
		Container:    n.id,
		OutputStream: &sb,
		ErrorStream:  &sb,
		Stdout:       true,
		Stderr:       true,
		Tail:         "30",
	})
	if err != nil {
		return fmt.Sprintf("(no logs: %v)", err)
	}
	return "--- container log ---\n" + sb.String()
}

// remove deletes the container and its network; errors are only logged.
func (n *Node) remove(t testing.TB) {
	if n.proxy != nil {
		_ = n.proxy.Close()
	}
	if n.id != "" {
		n.unpauseIfPaused()
		err := n.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: n.id, Force: true, RemoveVolumes: true})
		if err != nil {
			t.Logf("dockercluster: removing container %s: %v", n.name, err)
		}
	}
	if err := n.pool.Client.RemoveNetwork(n.network.Network.ID); err != nil {
		t.Logf("dockercluster: removing network %s: %v", n.name, err)
	}
}

// splitImage splits "repo[:tag]" (the repo may contain a registry host:port).
func splitImage(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitPing polls addr with PING until +PONG or timeout. Through docker-proxy a
// TCP connect succeeds even before Redis listens, so only a reply counts.
func waitPing(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := Ping(addr, time.Second)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ping sends one RESP PING to addr on a fresh connection and returns the
// round-trip time of the command (connection setup excluded).
func Ping(addr string, timeout time.Duration) (time.Duration, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return PingConn(conn)
}

// PingConn sends one RESP PING on an open connection and returns its round trip.
func PingConn(conn net.Conn) (time.Duration, error) {
	start := time.Now()
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "+PONG\r\n" {
		return 0, fmt.Errorf("unexpected reply %q", line)
	}
	return time.Since(start), nil
}

// pause freezes a container. runc gives up freezing a cgroup whose tasks
// do not stop in time ("unable to freeze", seen on a loaded machine) and
// leaves the container running, so that failure is tried again a few
// times before it fails the test.
func pause(c *dc.Client, id string) error {
	var err error
	for range 5 {
		if err = c.PauseContainer(id); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}
