package dockercluster_test

import (
	"context"
	"errors"
	"net"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/dockercluster"
)

const short = 500 * time.Millisecond

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  short,
		ReadTimeout:  short,
		WriteTimeout: short,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustPing(t *testing.T, addr string) {
	t.Helper()
	if _, err := dockercluster.Ping(addr, 2*time.Second); err != nil {
		t.Fatalf("PING %s: %v", addr, err)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := pingConn(conn, time.Second); err != nil {
		t.Fatalf("PING on fresh connection: %v", err)
	}
	return conn
}

func pingConn(conn net.Conn, timeout time.Duration) (time.Duration, error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return dockercluster.PingConn(conn)
}

func TestKillStart(t *testing.T) {
	cl := dockercluster.Start(t, 2)
	addrs := cl.Addrs()
	if len(addrs) != 2 || addrs[0] == addrs[1] {
		t.Fatalf("Addrs() = %v, want 2 distinct addresses", addrs)
	}
	for _, a := range addrs {
		mustPing(t, a)
	}
	ctx := context.Background()
	n0 := cl.Nodes[0]
	c0 := client(t, n0.Addr())
	if err := c0.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := dial(t, n0.Addr())

	dockerAddr := n0.DockerAddr()

	n0.Kill(t)
	_, errOld := pingConn(old, short)
	_, errNew := dockercluster.Ping(addrs[0], short)
	_, errDocker := dockercluster.Ping(dockerAddr, short)
	t.Logf("after Kill: open connection: %v; new connection: %v; DockerAddr: %v", errOld, errNew, errDocker)
	if errOld == nil || errNew == nil || errDocker == nil {
		t.Fatal("PING succeeded on a killed node")
	}
	mustPing(t, addrs[1])

	n0.Start(t)
	if n0.Addr() != addrs[0] || n0.DockerAddr() != dockerAddr {
		t.Errorf("addresses changed across Kill/Start: %s, %s -> %s, %s", addrs[0], dockerAddr, n0.Addr(), n0.DockerAddr())
	}
	mustPing(t, n0.Addr())
	c0 = client(t, n0.Addr())
	if err := c0.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Kill/Start: %v, want redis.Nil (empty dataset)", err)
	}
}

func TestPause(t *testing.T) {
	n := dockercluster.Start(t, 1).Nodes[0]
	ctx := context.Background()
	c := client(t, n.Addr())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	n.Pause(t)
	start := time.Now()
	_, err := dockercluster.Ping(n.Addr(), short)
	t.Logf("PING on paused node: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if err == nil {
		t.Fatal("PING succeeded on a paused node")
	}
	n.Unpause(t)
	mustPing(t, n.Addr())
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k after Unpause = %q, %v; want data kept", v, err)
	}
	// Left paused on purpose: cleanup must still remove it.
	n.Pause(t)
}

func TestDisconnect(t *testing.T) {
	n := dockercluster.Start(t, 1).Nodes[0]
	addr := n.Addr()
	ctx := context.Background()
	if err := client(t, addr).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := dial(t, addr)

	n.Disconnect(t)
	start := time.Now()
	_, errOld := pingConn(old, short)
	tOld := time.Since(start)
	start = time.Now()
	_, errNew := dockercluster.Ping(addr, short)
	tNew := time.Since(start)
	t.Logf("after Disconnect: open connection: %v (%v); new connection: %v (%v)",
		errOld, tOld.Round(time.Millisecond), errNew, tNew.Round(time.Millisecond))
	if errOld == nil {
		t.Error("PING on a connection opened before Disconnect still works")
	}
	if errNew == nil {
		t.Error("PING on a new connection works after Disconnect")
	}

	dockerAddr := n.DockerAddr()
	n.Reconnect(t)
	if n.Addr() != addr || n.DockerAddr() != dockerAddr {
		t.Errorf("address changed across Disconnect/Reconnect: %s -> %s", dockerAddr, n.DockerAddr())
	}
	mustPing(t, n.Addr())
	if v, err := client(t, n.Addr()).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k after Reconnect = %q, %v; want data kept (Redis kept running)", v, err)
	}
}

func TestPartition(t *testing.T) {
	n := dockercluster.Start(t, 1).Nodes[0]
	addr := n.Addr()
	old := dial(t, addr)

	n.Partition(t)
	_, errOld := pingConn(old, short)
	_, errNew := dockercluster.Ping(addr, short)
	t.Logf("after Partition: open connection: %v; new connection: %v", errOld, errNew)
	var ne net.Error
	if !errors.As(errOld, &ne) || !ne.Timeout() {
		t.Errorf("open connection during Partition: %v, want a timeout", errOld)
	}
	if !errors.As(errNew, &ne) || !ne.Timeout() {
		t.Errorf("new connection during Partition: %v, want a timeout", errNew)
	}

	n.Heal(t)
	n.Heal(t) // idempotent
	if n.Addr() != addr {
		t.Errorf("address changed across Partition/Heal: %s -> %s", addr, n.Addr())
	}
	mustPing(t, addr)
}

func TestLatency(t *testing.T) {
	n := dockercluster.Start(t, 1).Nodes[0]
	conn := dial(t, n.Addr())
	median := func() time.Duration {
		t.Helper()
		var rtts []time.Duration
		for i := 0; i < 5; i++ {
			rtt, err := pingConn(conn, 5*time.Second)
			if err != nil {
				t.Fatalf("PING: %v", err)
			}
			rtts = append(rtts, rtt)
		}
		sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
		return rtts[len(rtts)/2]
	}

	const d = 100 * time.Millisecond
	base := median() // connection opened before AddLatency
	n.AddLatency(t, d)
	slow := median()
	fresh, err := dockercluster.Ping(n.Addr(), 5*time.Second) // new connection
	if err != nil {
		t.Fatal(err)
	}
	direct, err := dockercluster.Ping(n.DockerAddr(), 5*time.Second) // bypasses the forwarder
	if err != nil {
		t.Fatal(err)
	}
	n.ClearLatency(t)
	n.ClearLatency(t) // idempotent
	after := median()
	t.Logf("PING round trip: before %v; with AddLatency(%v): open conn %v, new conn %v, DockerAddr %v; after ClearLatency %v",
		base, d, slow, fresh, direct, after)
	if slow < base+d/2 {
		t.Errorf("latency not applied to an open connection: %v -> %v with AddLatency(%v)", base, slow, d)
	}
	if fresh < base+d/2 {
		t.Errorf("latency not applied to a new connection: %v with AddLatency(%v)", fresh, d)
	}
	if after > base+d/2 {
		t.Errorf("latency not cleared: %v after ClearLatency (base %v)", after, base)
	}
}
