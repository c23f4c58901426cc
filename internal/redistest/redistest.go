// Package redistest starts redis-server processes for tests, on top of
// internal/redisserver (which commands use too, without the testing
// package), and makes the tests' go-redis clients.
package redistest

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// Start launches n redis-server processes for a test (see
// redisserver.Launch), in
// directories under t.TempDir(), and stops them in t.Cleanup. If
// redis-server is not on PATH the test is skipped, or failed when
// REDLOCK_REQUIRE_REDIS=1 (see internal/testenv); any other error fails it.
func Start(t testing.TB, n int) *redisserver.Cluster {
	t.Helper()
	if _, err := exec.LookPath(redisserver.Binary); err != nil {
		testenv.SkipOrFail(t, testenv.Redis,
			"redisserver: %s not found on PATH (%v); install it (Debian: apt-get install redis-server)", redisserver.Binary, err)
	}
	c, err := redisserver.Launch(context.Background(), n, redisserver.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// StartCluster launches one Redis Cluster of masters masters with
// replicas replicas each (see redisserver.LaunchRedisCluster), in
// directories under t.TempDir(), and stops it in t.Cleanup. If
// redis-server or redis-cli is not on PATH the test is skipped, or failed
// when REDLOCK_REQUIRE_REDIS=1; any other error fails it.
func StartCluster(t testing.TB, masters, replicas int) *redisserver.Cluster {
	t.Helper()
	for _, bin := range []string{redisserver.Binary, redisserver.CLIBinary} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.SkipOrFail(t, testenv.Redis,
				"redisserver: %s not found on PATH (%v); install it (Debian: apt-get install redis-server redis-tools)", bin, err)
		}
	}
	c, err := redisserver.LaunchRedisCluster(context.Background(), masters, replicas, redisserver.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// ClusterClient returns a go-redis cluster client for the cluster at
// addrs (seed addresses), configured as Client is. It is closed when the
// test ends.
func ClusterClient(t testing.TB, addrs ...string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// Client returns a go-redis client for addr as the lockers need it:
// context deadlines honoured, never a resent command, a bounded dial. It is
// closed when the test ends.
func Client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// StartSentinel launches a master, its replica and three sentinels
// monitoring it as redisserver.MasterName (see redisserver.LaunchSentinel),
// in directories under t.TempDir(), and stops them in t.Cleanup. If
// redis-server is not on PATH the test is skipped, or failed when
// REDLOCK_REQUIRE_REDIS=1; any other error fails it.
func StartSentinel(t testing.TB) *redisserver.Sentinel {
	t.Helper()
	if _, err := exec.LookPath(redisserver.Binary); err != nil {
		testenv.SkipOrFail(t, testenv.Redis,
			"redisserver: %s not found on PATH (%v); install it (Debian: apt-get install redis-server)", redisserver.Binary, err)
	}
	s, err := redisserver.LaunchSentinel(context.Background(), redisserver.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// FailoverClient returns a go-redis failover client of the master that
// the sentinels at sentinelAddrs monitor as redisserver.MasterName,
// configured as Client is. It is closed when the test ends.
func FailoverClient(t testing.TB, sentinelAddrs ...string) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redisserver.MasterName,
		SentinelAddrs: sentinelAddrs, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}
