package goredis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testenv"

	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(stopsCluster{m})
}

// stopsCluster runs the tests, then stops the shared Redis Cluster if one
// was started, before goleak looks for goroutines left behind.
type stopsCluster struct{ *testing.M }

func (m stopsCluster) Run() int {
	code := m.M.Run()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// shared is the Redis Cluster of this package's tests (3 masters with a
// replica each), started by the first test that needs it.
var shared struct {
	once sync.Once
	c    *redisserver.Cluster
	err  error
}

// redisCluster returns the shared Redis Cluster, skipping the test (or
// failing it, see internal/testenv) when redis-server or redis-cli is not
// on PATH. Tests share it: each uses keys of its own.
func redisCluster(t testing.TB) *redisserver.Cluster {
	t.Helper()
	for _, bin := range []string{redisserver.Binary, redisserver.CLIBinary} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.SkipOrFail(t, testenv.Redis,
				"%s not found on PATH (%v); install it (Debian: apt-get install redis-server redis-tools)", bin, err)
		}
	}
	shared.once.Do(func() {
		shared.c, shared.err = redisserver.LaunchRedisCluster(context.Background(), 3, 1, redisserver.Options{})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.c
}

// clusterBackend returns a cluster node (with opts) over a fresh client of
// the shared cluster, seeded with its first server.
func clusterBackend(t testing.TB, opts ...Option) (*clusterNode, *redis.ClusterClient) {
	t.Helper()
	cc := redistest.ClusterClient(t, redisCluster(t).Addrs()[0])
	b, err := New(cc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b.(*clusterNode), cc
}

const watchdog = testwait.Watchdog

// adapt is New for a client the test knows to be valid, as the concrete
// type, for tests that look inside the adapter.
func adapt(t testing.TB, c redis.UniversalClient) *node {
	t.Helper()
	switch b := backend(t, c).(type) {
	case *wireNode:
		return b.node
	default:
		return b.(*node)
	}
}

// backend is New(c, opts...), failing t on error; a node of its own
// connection is closed when t ends.
func backend(t testing.TB, c redis.UniversalClient, opts ...Option) redlock.Backend {
	t.Helper()
	b, err := New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cl, ok := b.(interface{ Close() error }); ok {
		t.Cleanup(func() { _ = cl.Close() })
	}
	return b
}

// standalone is a standalone master (miniredis) as a node.
func standalone(t testing.TB) redlock.Backend {
	return adapt(t, redistest.Client(t, miniredis.RunT(t).Addr()))
}
