package envconfig

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSentinelURL(t *testing.T) {
	o, sentinel, err := sentinelOptions("redis+sentinel://alice:p%40ss@10.0.0.1/3?master_name=mymaster&addr=10.0.0.2:26380&addr=[::1]:26381&dial_timeout=3s")
	require.NoError(t, err)
	require.True(t, sentinel)
	assert.Equal(t, "mymaster", o.MasterName)
	assert.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26380", "[::1]:26381"}, o.SentinelAddrs)
	assert.Equal(t, "alice", o.Username, "the user info is the master's")
	assert.Equal(t, "p@ss", o.Password)
	assert.Empty(t, o.SentinelUsername)
	assert.Empty(t, o.SentinelPassword)
	assert.Equal(t, 3, o.DB)
	assert.Equal(t, 3*time.Second, o.DialTimeout)
	assert.True(t, o.ContextTimeoutEnabled)
	assert.Nil(t, o.TLSConfig)

	o, _, err = sentinelOptions("redis+sentinel://h:1?master_name=m")
	require.NoError(t, err)
	assert.Equal(t, []string{"h:1"}, o.SentinelAddrs)
	assert.Zero(t, o.DB)
	assert.Empty(t, o.Password)

	o, _, err = sentinelOptions("redis+sentinel://h:1?master_name=m&db=2")
	require.NoError(t, err)
	assert.Equal(t, 2, o.DB)

	o, _, err = sentinelOptions("rediss+sentinel://s.example?master_name=m")
	require.NoError(t, err)
	assert.Equal(t, []string{"s.example:26379"}, o.SentinelAddrs)
	require.NotNil(t, o.TLSConfig)
	assert.Equal(t, "s.example", o.TLSConfig.ServerName)

	for _, u := range []string{"redis://10.0.0.1:6379", "rediss://h:1", "unix:///tmp/r.sock", "redis+cluster://h:1", "sentinel://h:1?master_name=m"} {
		_, sentinel, err := sentinelOptions(u)
		assert.False(t, sentinel, u)
		assert.NoError(t, err, u)
	}
}

// In LOCK_DISTRIBUTED_NODES a sentinel URL is one piece of the list, its
// other sentinels in addr query parameters, like a cluster URL's seeds.
func TestSentinelURLInTheList(t *testing.T) {
	c, err := Load(vars(map[string]string{VarNodes: "redis://10.0.1.1:6379, redis+sentinel://10.0.0.1?master_name=mymaster&addr=10.0.0.2:26380,redis://10.0.1.2:6379,redis+sentinel://:a%2Cb@10.0.0.3/1?master_name=other"}))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"redis://10.0.1.1:6379",
		"redis+sentinel://10.0.0.1?master_name=mymaster&addr=10.0.0.2:26380",
		"redis://10.0.1.2:6379",
		"redis+sentinel://:a%2Cb@10.0.0.3/1?master_name=other",
	}, c.Nodes)
}

func TestSentinelURLMalformed(t *testing.T) {
	for _, v := range []string{
		"redis+sentinel://10.0.0.1:26379",                               // no master name
		"redis+sentinel://10.0.0.1:26379?master_name=",                  // empty master name
		"redis+sentinel://?master_name=m",                               // no host
		"redis+sentinel:///0?master_name=m",                             // no host, a db
		"redis+sentinel://:26379?master_name=m",                         // no host name
		"redis+sentinel://10.0.0.1:x?master_name=m",                     // bad port
		"redis+sentinel://10.0.0.1:0?master_name=m",                     // port 0
		"redis+sentinel://10.0.0.1:65536?master_name=m",                 // port too large
		"redis+sentinel://10.0.0.1:?master_name=m",                      // empty port
		"redis+sentinel://h?master_name=m&addr=h2",                      // an addr without its port
		"redis+sentinel://h?master_name=m&addr=h2:0",                    // an addr with port 0
		"redis+sentinel://h?master_name=m&addr=:26379",                  // an addr without a host
		"redis+sentinel://h/x?master_name=m",                            // bad db
		"redis+sentinel://h/-1?master_name=m",                           // negative db
		"redis+sentinel://h?master_name=m&db=-1",                        // negative db in the query
		"redis+sentinel://h/1/2?master_name=m",                          // a path that is no db
		"redis+sentinel://h?master_name=m&bogus=1",                      // unknown option
		"redis+sentinel://h?master_name=m&password=p",                   // a password in the query
		"redis+sentinel://h?master_name=m&username=u",                   // a user in the query
		"redis+sentinel://u:%zz@h?master_name=m",                        // bad escape
		"redis+sentinel://10.0.0.1,10.0.0.2?master_name=m",              // the old comma form
		"redis+sentinel://10.0.0.1/mymaster",                            // the old path form
		"redis+sentinel://h:1?master_name=m&dial_timeout=soon",          // bad option value
		"redis+sentinel://h:1?master_name=m&addr=h2:1&route_randomly=x", // bad option value
	} {
		_, err := Load(vars(map[string]string{VarNodes: v}))
		assert.ErrorIs(t, err, redlock.ErrInvalid, v)
		var e *Error
		if assert.ErrorAs(t, err, &e, v) {
			assert.Equal(t, VarNodes, e.Var)
		}
		c := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{v}}
		_, _, err = c.Open()
		assert.ErrorIs(t, err, redlock.ErrInvalid, v)
	}
	// In the list, a comma ends the URL: the piece after it needs a scheme.
	_, err := Load(vars(map[string]string{VarNodes: "redis+sentinel://10.0.0.1?master_name=m,10.0.0.2:26379"}))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
}

// A sentinel URL's password shows in no error, however the URL is broken.
func TestSentinelURLErrorsHidePasswords(t *testing.T) {
	enc := url.UserPassword("alice", secret).String()
	for _, v := range []string{
		"redis+sentinel://" + enc + "@h:x?master_name=m",
		"redis+sentinel://" + enc + "@h",                               // no master name
		"redis+sentinel://" + enc + "@h/x?master_name=m",               // bad db
		"redis+sentinel://" + enc + "@h?master_name=m&addr=h2",         // bad addr
		"redis+sentinel://" + enc + "@h?master_name=m&bogus=1",         // unknown option
		"redis+sentinel://alice:" + secret + "@h/m/x",                  // unescaped '/' in the password
		"redis+sentinel://alice:" + secret + "%zz@h?master_name=m",     // bad escape
		"redis+sentinel://alice:pa55,w0rd@h:1:2?master_name=m",         // a comma in the password
		"redis+sentinel://alice:pa55@w0rd@h?master_name=m&x=1",         // an unescaped '@'
		"redis+sentinel://alice:1?db=" + secret + "@h?master_name=m",   // a '?' in the password
		"redis+sentinel://alice:1/" + secret + "@h?master_name=m&db=1", // a '/' in the password
	} {
		_, err := Load(vars(map[string]string{VarNodes: v}))
		require.ErrorIs(t, err, redlock.ErrInvalid, v)
		assertNoSecret(t, err)
		c := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{v}}
		_, _, err = c.Open()
		require.ErrorIs(t, err, redlock.ErrInvalid, v)
		assertNoSecret(t, err)
	}
}

// A redis+sentinel:// node on the real topology: a Single over the
// failover client locks and excludes, and the same master listed twice is
// one node counted twice, refused.
func TestSentinelOpenRealTopology(t *testing.T) {
	topo := redistest.StartSentinel(t)
	sentinelURL := func(addrs []string) string {
		u := "redis+sentinel://" + addrs[0] + "?master_name=" + url.QueryEscape(redisserver.MasterName)
		for _, a := range addrs[1:] {
			u += "&addr=" + a
		}
		return u
	}
	u := sentinelURL(topo.SentinelAddrs())
	c, err := Load(vars(map[string]string{VarEnabled: "true", VarStrategy: "reject", VarTTL: "5", VarNodes: u}))
	require.NoError(t, err)
	l, closer, err := c.Open()
	require.NoError(t, err)
	defer closer.Close()
	assert.NoError(t, closer.Ping(t.Context()), "the sentinels name a master that answers")

	lk, err := l.Lock(t.Context(), "order:1")
	require.NoError(t, err)
	_, err = l.Lock(t.Context(), "order:1")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	master, err := topo.MasterAddr()
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), redistest.Client(t, master).Get(t.Context(), "order:1").Val())
	require.NoError(t, lk.Unlock(t.Context()))

	rev := topo.SentinelAddrs()
	rev[0], rev[len(rev)-1] = rev[len(rev)-1], rev[0]
	c.Nodes = []string{u, sentinelURL(rev)}
	_, _, err = c.Open()
	assert.ErrorIs(t, err, redlock.ErrInvalid, "one master through the same sentinels, twice")
	assert.Contains(t, strings.Join(c.Nodes, ","), "&addr=")
}
