package redisserver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testenv"
)

// TestMain fails the package when a test leaves a goroutine behind (each
// server has one that reaps its process).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  300 * time.Millisecond,
		ReadTimeout:  300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond,
		MaxRetries:   -1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ping(c *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

func TestLifecycle(t *testing.T) {
	cl := redistest.Start(t, 2)
	addrs := cl.Addrs()
	if len(addrs) != 2 || addrs[0] == addrs[1] {
		t.Fatalf("Addrs() = %v, want 2 distinct addresses", addrs)
	}
	ctx := context.Background()
	clients := []*redis.Client{client(t, addrs[0]), client(t, addrs[1])}
	for i, c := range clients {
		if err := ping(c); err != nil {
			t.Fatalf("server %d (%s): PING: %v", i, addrs[i], err)
		}
		if !cl.Servers[i].Running() {
			t.Fatalf("server %d: Running() = false after Start", i)
		}
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("server %d: SET: %v", i, err)
		}
	}

	s0 := cl.Servers[0]
	s0.Kill()
	s0.Kill() // idempotent
	if s0.Running() {
		t.Fatal("Running() = true after Kill")
	}
	if err := ping(clients[0]); err == nil {
		t.Fatal("PING succeeded on a killed server")
	}
	if err := ping(clients[1]); err != nil {
		t.Fatalf("other server affected by Kill: %v", err)
	}

	if err := s0.Restart(); err != nil {
		t.Fatal(err)
	}
	if s0.Addr() != addrs[0] {
		t.Fatalf("address changed across Restart: %s -> %s", addrs[0], s0.Addr())
	}
	if !s0.Running() {
		t.Fatal("Running() = false after Restart")
	}
	if err := ping(clients[0]); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := clients[0].Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil (empty dataset)", err)
	}
	if v, err := clients[1].Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k on untouched server = %q, %v; want \"v\"", v, err)
	}

	// Pause: the TCP connection stays up but nothing answers within the timeout.
	s1 := cl.Servers[1]
	s1.Pause()
	if !s1.Running() {
		t.Fatal("paused server should still count as running")
	}
	start := time.Now()
	if err := ping(clients[1]); err == nil {
		t.Fatal("PING succeeded on a paused server")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("PING on a paused server failed fast (%v), expected a timeout", d)
	}
	s1.Resume()
	if err := ping(clients[1]); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	if v, err := clients[1].Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k after Resume = %q, %v; want data kept", v, err)
	}

	// Leave one server paused: cleanup must still kill it.
	s1.Pause()
}

func TestRestartRunningServer(t *testing.T) {
	cl := redistest.Start(t, 1)
	s := cl.Servers[0]
	c := client(t, s.Addr())
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil { // kills the live process first
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: %v, want redis.Nil", err)
	}
}

func TestAvailable(t *testing.T) {
	if !redisserver.Available() && testenv.Required(testenv.Redis) {
		t.Fatal("redis-server not on PATH but REDLOCK_REQUIRE_REDIS=1")
	}
}

// TestRedisCluster: three masters with a replica each form one cluster in
// which every slot is served, a cluster client reaches every master, and
// Stop ends every process.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	if len(cl.Servers) != 6 {
		t.Fatalf("%d servers, want 6", len(cl.Servers))
	}
	ctx := context.Background()
	cc := redistest.ClusterClient(t, cl.Addrs()[0])
	masters := map[string]bool{}
	for i := range 64 {
		key := fmt.Sprintf("k%d", i)
		if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if cl.ServerAt(m.Options().Addr) == nil {
			t.Fatalf("master %s of %s is none of the cluster's servers %v", m.Options().Addr, key, cl.Addrs())
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("64 keys landed on %d masters, want 3", len(masters))
	}
	for _, s := range cl.Servers {
		info, err := client(t, s.Addr()).ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("%s: CLUSTER INFO = %q, %v", s.Addr(), info, err)
		}
	}
	pids := []int{}
	for _, s := range cl.Servers {
		pids = append(pids, s.PID())
	}
	if err := cl.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, s := range cl.Servers {
		if s.Running() {
			t.Fatalf("server %d (pid %d) still running after Stop", i, pids[i])
		}
	}
}

func TestLaunchRedisClusterRefusesTooFewMasters(t *testing.T) {
	if _, err := redisserver.LaunchRedisCluster(context.Background(), 2, 1, redisserver.Options{}); err == nil {
		t.Fatal("LaunchRedisCluster with 2 masters: no error")
	}
}

// TestJoinClusterRefusesBadShapes: JoinCluster needs three masters or more,
// and no more masters than nodes; it says so before contacting any node.
// (Joining containers is tested in internal/dockercluster, TestRedisClusterUp.)
func TestJoinClusterRefusesBadShapes(t *testing.T) {
	nodes := []redisserver.ClusterNode{{Addr: "127.0.0.1:1", BusPort: 2}, {Addr: "127.0.0.1:3", BusPort: 4}, {Addr: "127.0.0.1:5", BusPort: 6}}
	for _, masters := range []int{2, 4} {
		err := redisserver.JoinCluster(context.Background(), nodes, masters)
		if err == nil || !strings.Contains(err.Error(), "masters among") {
			t.Errorf("%d masters among 3 nodes: got %v, want a refusal", masters, err)
		}
	}
}
