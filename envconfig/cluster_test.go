package envconfig

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterURLParsing: what a redis+cluster:// URL turns into.
func TestClusterURLParsing(t *testing.T) {
	o, cluster, err := clusterOptions("redis+cluster://alice:" + url.PathEscape(secret) +
		"@10.0.0.1:7000/0?addr=10.0.0.2:7001&addr=[::1]:7002&dial_timeout=3s")
	require.NoError(t, err)
	require.True(t, cluster)
	assert.Equal(t, []string{"10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"}, o.Addrs)
	assert.Equal(t, "alice", o.Username)
	assert.Equal(t, secret, o.Password)
	assert.Equal(t, 3*time.Second, o.DialTimeout)
	assert.Nil(t, o.TLSConfig)

	o, cluster, err = clusterOptions("rediss+cluster://db.example:7000")
	require.NoError(t, err)
	require.True(t, cluster)
	assert.Equal(t, []string{"db.example:7000"}, o.Addrs)
	require.NotNil(t, o.TLSConfig)
	assert.Equal(t, "db.example", o.TLSConfig.ServerName)

	o, _, err = clusterOptions("redis+cluster://10.0.0.1") // the default port, as redis://
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:6379"}, o.Addrs)

	for _, u := range []string{"redis://10.0.0.1:6379", "rediss://h:1", "unix:///tmp/r.sock", "redis+sentinel://h:1"} {
		_, cluster, err := clusterOptions(u)
		assert.False(t, cluster, u)
		assert.NoError(t, err, u)
	}

	c, err := Load(vars(map[string]string{VarNodes: "redis+cluster://h1:7000?addr=h2:7001, redis://h3:6379"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"redis+cluster://h1:7000?addr=h2:7001", "redis://h3:6379"}, c.Nodes)
}

// TestClusterURLMalformed: bad cluster URLs are *Errors for NODES that
// match ErrInvalid, from Load and from Open, and never show the password.
func TestClusterURLMalformed(t *testing.T) {
	pw := "alice:" + url.PathEscape(secret) + "@"
	for _, u := range []string{
		"redis+cluster://",                        // no host
		"redis+cluster://?addr=h:7001",            // no host, only an addr
		"redis+cluster://" + pw + "h1:70000",      // port out of range
		"redis+cluster://" + pw + "h1:port",       // not a number
		"redis+cluster://h1:7000?addr=h2",         // an addr without a port
		"redis+cluster://h1:7000?addr=h2:0",       // port 0
		"redis+cluster://" + pw + "h1:7000/1",     // a cluster has db 0 only
		"redis+cluster://h1:7000/x",               // not even a number
		"redis+cluster://h1:7000?dial_timeout=xx", // go-redis's option parser
		"redis+cluster://h1:7000?nosuch=1",        // unknown option
		"redis+cluster://alice:pa55/w0rd@h1:7000", // unescaped '/' in the password
		"redis+cluster://h1:7000/pa55@h2",         // a password where the path is
		"redis+cluster://pa55:w0rd?x@h2",          // a password where the host is
		"redis+cluster://alice:pa55,w0rd@h1:7:0",  // a comma in the password
		"redis+cluster://h1,h2:7000",              // the sentinel URL's old comma form
	} {
		t.Run(u, func(t *testing.T) {
			_, err := Load(vars(map[string]string{VarNodes: u}))
			require.Error(t, err)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			var ee *Error
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, VarNodes, ee.Var)
			assertNoSecret(t, err, "pa55", "w0rd", "alice")

			_, _, err = Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{u}}.Open()
			assert.ErrorIs(t, err, redlock.ErrInvalid, "Open")
			assertNoSecret(t, err, "pa55", "w0rd", "alice")
		})
	}
	_, err := Load(vars(map[string]string{VarNodes: "redis+cluster://h1:7000/5"}))
	assert.ErrorContains(t, err, "database 0 only")
}

// TestClusterURLOpen: a Locker from LOCK_DISTRIBUTED_NODES with a
// redis+cluster:// URL on a real Redis Cluster, alone (a Single) and
// with two standalone masters (a Redlock of 3 nodes).
func TestClusterURLOpen(t *testing.T) {
	seeds := redistest.StartCluster(t, 3, 0).Addrs()
	cluster := "redis+cluster://" + seeds[0] + "?addr=" + seeds[1] + "&addr=" + seeds[2]
	standalone := redistest.Start(t, 2).Addrs()
	for name, nodes := range map[string][]string{
		"cluster alone":       {cluster},
		"cluster + 2 masters": {cluster, "redis://" + standalone[0], "redis://" + standalone[1]},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Load(vars(map[string]string{
				VarEnabled: "true", VarStrategy: "reject", VarTTL: "5",
				VarNodes: strings.Join(nodes, ","),
			}))
			require.NoError(t, err)
			l, closer, err := c.Open()
			require.NoError(t, err)
			defer closer.Close()
			require.NoError(t, closer.Ping(t.Context()), "every master answers")
			key := "order:" + strconv.Itoa(len(nodes))
			first, err := l.Lock(t.Context(), key)
			require.NoError(t, err)
			_, err = l.Lock(t.Context(), key)
			assert.ErrorIs(t, err, redlock.ErrNotAcquired)

			// On the cluster the key is wrapped in a hash tag (goredis).
			cc := redistest.ClusterClient(t, seeds...)
			assert.Equal(t, first.Token(), cc.Get(t.Context(), "{"+key+"}").Val())
			ttl := cc.PTTL(t.Context(), "{"+key+"}").Val()
			assert.True(t, ttl > 4*time.Second && ttl <= 5*time.Second, "TTL %v", ttl)
			for _, a := range standalone[:len(nodes)-1] {
				assert.Equal(t, first.Token(), redistest.Client(t, a).Get(t.Context(), key).Val(), a)
			}
			require.NoError(t, first.Unlock(t.Context()))
			again, err := l.Lock(t.Context(), key)
			require.NoError(t, err)
			require.NoError(t, again.Unlock(t.Context()))
			require.NoError(t, closer.Close())
		})
	}
}
