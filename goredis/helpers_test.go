package goredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testenv"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
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

// clusterNode returns a node (with opts) over a fresh client of the shared
// cluster, seeded with its first server, and that client.
func clusterNode(t testing.TB, opts ...Option) (*Node, *redis.ClusterClient) {
	t.Helper()
	cc := redistest.ClusterClient(t, redisCluster(t).Addrs()[0])
	n := adapt(t, cc, opts...)
	require.True(t, n.Info().Cluster, "a cluster client makes a cluster node")
	return n, cc
}

const watchdog = testwait.Watchdog

// adapt is New(c, opts...), failing t on error; the node is closed when t
// ends (which ends its lingering subscriptions).
func adapt(t testing.TB, c redis.UniversalClient, opts ...Option) *Node {
	t.Helper()
	n, err := New(c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// standalone is a standalone master (miniredis) as a node.
func standalone(t testing.TB) *Node {
	return adapt(t, redistest.Client(t, miniredis.RunT(t).Addr()))
}

// serverNodes starts n redis-server processes and returns a node of each.
func serverNodes(t *testing.T, n int) []driver.Node {
	t.Helper()
	nodes := make([]driver.Node, n)
	for i, addr := range redistest.Start(t, n).Addrs() {
		nodes[i] = adapt(t, redistest.Client(t, addr))
	}
	return nodes
}

func newSingle(t testing.TB, n driver.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	l, err := redlock.NewSingle(n, opts...)
	require.NoError(t, err)
	return l
}

func newRedlock(t testing.TB, nodes []driver.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	l, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	return l
}

// fresh returns a key of its own for a test, without a hash tag.
func fresh(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + ":" + hex.EncodeToString(b[:])
}

// releaseChannel is the channel on which the core announces a release of
// key as a node names it (on a cluster, an untagged key in braces).
func releaseChannel(key string) string { return "redlock:released:" + key }

// fenceSuffix ends the name of a key's fence counter.
const fenceSuffix = ":fence"

// counting is a script with a side effect to count its executions: it
// increments KEYS[1] and returns the new value.
var counting = driver.NewScript("counting", `return redis.call("incr", KEYS[1])`)

// quiet is how long a test waits for something that must not happen.
const quiet = 200 * time.Millisecond
