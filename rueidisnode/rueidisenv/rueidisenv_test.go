package rueidisenv

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/internal/badnode"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/respguard"
	"github.com/quorumlock/redlock/rueidisnode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const secret = "pa55/w0rd"

// errStop stops an OpenWith once the Node is seen.
var errStop = errors.New("stop")

// load is envconfig.Load over a map, so the tests never read the process
// environment.
func load(t *testing.T, env map[string]string) envconfig.Config {
	t.Helper()
	c, err := envconfig.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	return c
}

// node parses u as envconfig does.
func node(t *testing.T, u string) envconfig.Node {
	t.Helper()
	var got envconfig.Node
	lib := envconfig.Client{Name: envconfig.ClientRueidis, OpenNode: func(n envconfig.Node) (driver.Node, io.Closer, error) {
		got = n
		return nil, nil, errStop
	}}
	c := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyReject, TTL: time.Second, Nodes: []string{u}, Client: envconfig.ClientRueidis}
	_, _, err := c.OpenWith(lib)
	require.ErrorIs(t, err, errStop, u)
	return got
}

// TestClientOption: what each kind of URL becomes in rueidis's options.
func TestClientOption(t *testing.T) {
	pw := "alice:" + url.PathEscape(secret) + "@"
	opt, err := clientOption(node(t, "redis://"+pw+"10.0.0.1:6380/3?dial_timeout=2s&client_name=orders"))
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:6380"}, opt.InitAddress)
	assert.True(t, opt.ForceSingleClient, "one master, even if it is a cluster member")
	assert.True(t, opt.DisableCache)
	assert.Zero(t, opt.ConnLifetime, "rueidisnode requires it")
	assert.Equal(t, "alice", opt.Username)
	assert.Equal(t, secret, opt.Password)
	assert.Equal(t, 3, opt.SelectDB)
	assert.Equal(t, 2*time.Second, opt.Dialer.Timeout)
	assert.Equal(t, "orders", opt.ClientName)
	assert.Nil(t, opt.TLSConfig)
	assert.Nil(t, opt.DialCtxFn)

	opt, err = clientOption(node(t, "rediss://db.example:6379?skip_verify=true"))
	require.NoError(t, err)
	require.NotNil(t, opt.TLSConfig)
	assert.Equal(t, "db.example", opt.TLSConfig.ServerName)
	assert.True(t, opt.TLSConfig.InsecureSkipVerify)

	opt, err = clientOption(node(t, "unix:///run/redis.sock"))
	require.NoError(t, err)
	assert.Equal(t, []string{"/run/redis.sock"}, opt.InitAddress)
	assert.NotNil(t, opt.DialCtxFn, "dials the socket")

	opt, err = clientOption(node(t, "redis+cluster://"+pw+"h1:7000?addr=h2:7001"))
	require.NoError(t, err)
	assert.Equal(t, []string{"h1:7000", "h2:7001"}, opt.InitAddress)
	assert.False(t, opt.ForceSingleClient)
	assert.Equal(t, secret, opt.Password)

	opt, err = clientOption(node(t, "rediss+sentinel://"+pw+"s1/2?master_name=mymaster&addr=s2:26380"))
	require.NoError(t, err)
	assert.Equal(t, []string{"s1:26379", "s2:26380"}, opt.InitAddress)
	assert.Equal(t, "mymaster", opt.Sentinel.MasterSet)
	assert.Equal(t, "alice", opt.Username, "the user info is the master's")
	assert.Equal(t, secret, opt.Password)
	assert.Empty(t, opt.Sentinel.Password, "not the sentinels'")
	assert.Equal(t, 2, opt.SelectDB)
	assert.NotNil(t, opt.TLSConfig)
	assert.NotNil(t, opt.Sentinel.TLSConfig)
}

// TestClientOptionRefused: what rueidis cannot do as the URL asks is an
// *envconfig.Error for NODES, never ignored, never showing the password;
// nothing is dialled.
func TestClientOptionRefused(t *testing.T) {
	pw := "alice:" + url.PathEscape(secret) + "@"
	for _, tt := range []struct{ url, says string }{
		{"redis://" + pw + "127.0.0.1:1?pool_size=10", "pool_size"},
		{"redis://127.0.0.1:1?read_timeout=1s", "read_timeout"},
		{"redis+cluster://127.0.0.1:1?route_randomly=true", "route_randomly"},
	} {
		c := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyReject, TTL: time.Second, Nodes: []string{tt.url}, Client: envconfig.ClientRueidis}
		_, _, err := c.OpenWith(Client())
		require.Error(t, err, tt.url)
		assert.ErrorIs(t, err, redlock.ErrInvalid, tt.url)
		var ee *envconfig.Error
		require.ErrorAs(t, err, &ee, tt.url)
		assert.Equal(t, envconfig.VarNodes, ee.Var)
		assert.Contains(t, err.Error(), tt.says)
		for _, piece := range []string{"pa55", "w0rd", "alice"} {
			assert.NotContains(t, err.Error(), piece)
		}
	}
}

// TestRueidisConfigExcludesGoRedis: a LOCK_DISTRIBUTED_CLIENT=rueidis
// configuration locks with rueidis nodes, and a go-redis configuration
// of the same servers is refused the key while it holds it, and the
// other way round.
func TestRueidisConfigExcludesGoRedis(t *testing.T) {
	addrs := redistest.Start(t, 3).Addrs()
	var nodes []string
	for _, a := range addrs {
		nodes = append(nodes, "redis://"+a+"?client_name=rueidisenv-test")
	}
	env := map[string]string{
		envconfig.VarEnabled: "true", envconfig.VarStrategy: "reject", envconfig.VarTTL: "60",
		envconfig.VarNodes: strings.Join(nodes, ","), envconfig.VarClient: "rueidis",
	}
	viaRueidis := open(t, load(t, env))
	env[envconfig.VarClient] = "go-redis"
	viaGoRedis := open(t, load(t, env))
	// rueidis connects at once and names its connections after client_name.
	assert.Contains(t, redistest.Client(t, addrs[0]).ClientList(t.Context()).Val(), "name=rueidisenv-test")

	for _, tc := range []struct {
		name        string
		first, then redlock.Locker
	}{{"rueidis then go-redis", viaRueidis, viaGoRedis}, {"go-redis then rueidis", viaGoRedis, viaRueidis}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "order:" + tc.name
			l, err := tc.first.Lock(t.Context(), key)
			require.NoError(t, err)
			_, err = tc.then.Lock(t.Context(), key)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "held for the other client library")
			require.NoError(t, l.Unlock(t.Context()))
			next, err := tc.then.Lock(t.Context(), key)
			require.NoError(t, err, "released, free for the other")
			require.NoError(t, next.Unlock(t.Context()))
		})
	}
}

// TestOpenReadsDotEnv: Open reads the .env file and opens rueidis nodes;
// a node that cannot be reached fails Open (rueidis connects at once), as
// an error that is not ErrInvalid.
func TestOpenReadsDotEnv(t *testing.T) {
	for _, k := range []string{envconfig.VarEnabled, envconfig.VarStrategy, envconfig.VarTTL, envconfig.VarNodes, envconfig.VarClient} {
		t.Setenv(k, "") // restored when the test ends
		os.Unsetenv(k)  // the file's value, not the environment's
	}
	addr := redistest.Start(t, 1).Addrs()[0]
	dotenv := filepath.Join(t.TempDir(), ".env")
	write := func(nodes string) {
		require.NoError(t, os.WriteFile(dotenv, []byte(fmt.Sprintf(
			"LOCK_DISTRIBUTED_ENABLED=true\nLOCK_DISTRIBUTED_STRATEGY=reject\nLOCK_DISTRIBUTED_CLIENT=rueidis\nLOCK_DISTRIBUTED_NODES=%s\n", nodes)), 0o600))
	}
	write("redis://" + addr)
	l, closer, err := Open(dotenv)
	require.NoError(t, err)
	defer closer.Close()
	lk, err := l.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, lk.Unlock(t.Context()))

	write("redis://127.0.0.1:1?dial_timeout=1s")
	_, _, err = Open(dotenv)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrInvalid, "an unreachable node is not bad input")
	assert.Contains(t, err.Error(), "127.0.0.1:1")
}

// TestOpenNodeIsRueidis: OpenNode's node is the rueidis adapter's, with
// replica acknowledgement when the URL asks for it.
func TestOpenNodeIsRueidis(t *testing.T) {
	addr := redistest.Start(t, 1).Addrs()[0]
	b, cl, err := OpenNode(node(t, "redis://"+addr))
	require.NoError(t, err)
	defer cl.Close()
	assert.Equal(t, "*rueidisnode.Node", fmt.Sprintf("%T", b))
	assert.Equal(t, driver.Info{Name: addr}, b.Info())

	b, cl, err = OpenNode(node(t, "redis://"+addr+"?replica_ack=2&replica_ack_timeout=5ms"))
	require.NoError(t, err)
	defer cl.Close()
	assert.True(t, b.Info().ReplicaAck, "replica_ack is rueidisnode.WithReplicaAck")
	_, err = b.Eval(t.Context(), driver.NewScript("set", `return redis.call("set", KEYS[1], "v")`), []string{"acked"})
	assert.ErrorIs(t, err, rueidisnode.ErrReplicaAck, "the server has no replica")
}

// TestClusterNode: a redis+cluster:// URL opens a rueidis cluster client
// as one node, which excludes a go-redis configuration of the same
// cluster.
func TestClusterNode(t *testing.T) {
	addrs := redistest.StartCluster(t, 3, 0).Addrs()
	u := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	sharedKeyExcludes(t, u)
}

// TestSentinelNode: a redis+sentinel:// URL opens a rueidis Sentinel
// client as one node, which excludes a go-redis configuration of the same
// master.
func TestSentinelNode(t *testing.T) {
	s := redistest.StartSentinel(t)
	sa := s.SentinelAddrs()
	u := "redis+sentinel://" + sa[0] + "?master_name=" + redisserver.MasterName + "&addr=" + sa[1] + "&addr=" + sa[2]
	sharedKeyExcludes(t, u)
}

// sharedKeyExcludes opens the one-node URL u with rueidis and with
// go-redis, and checks that a lock taken through either is refused to
// the other.
func sharedKeyExcludes(t *testing.T, u string) {
	t.Helper()
	c := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyReject, TTL: time.Minute, Nodes: []string{u}, Client: envconfig.ClientRueidis}
	viaRueidis, closer, err := c.OpenWith(Client())
	require.NoError(t, err)
	t.Cleanup(func() { closer.Close() })
	c.Client = envconfig.ClientGoRedis
	viaGoRedis := open(t, c)
	l, err := viaRueidis.Lock(t.Context(), "order:1")
	require.NoError(t, err)
	_, err = viaGoRedis.Lock(t.Context(), "order:1")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Unlock(t.Context()))
	l, err = viaGoRedis.Lock(t.Context(), "order:1")
	require.NoError(t, err)
	_, err = viaRueidis.Lock(t.Context(), "order:1")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Unlock(t.Context()))
}

// open opens c with this package's Client; closed when the test ends.
func open(t *testing.T, c envconfig.Config) *redlock.Redlock {
	t.Helper()
	l, closer, err := c.OpenWith(Client())
	require.NoError(t, err)
	t.Cleanup(func() { closer.Close() })
	return l
}

// TestOpenNodeIsGuarded: the clients OpenNode builds are behind
// rueidisnode.Guard, so a stale reply costs the connection, where rueidis
// would panic on its own goroutine.
func TestOpenNodeIsGuarded(t *testing.T) {
	bad := badnode.Start(t, badnode.Unsolicited)
	b, cl, err := OpenNode(node(t, "redis://"+bad.Addr()))
	require.NoError(t, err)
	defer cl.Close()
	_, err = b.Eval(t.Context(), driver.NewScript("probe", `return 1`), []string{"k"})
	var refused *respguard.Error
	assert.ErrorAs(t, err, &refused)
}
