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
	o, err := parseSentinelURL("redis+sentinel://alice:p%40ss@10.0.0.1,10.0.0.2:26380,[::1]:26381/mymaster/3")
	require.NoError(t, err)
	assert.Equal(t, "mymaster", o.MasterName)
	assert.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26380", "[::1]:26381"}, o.SentinelAddrs)
	assert.Equal(t, "alice", o.Username)
	assert.Equal(t, "p@ss", o.Password)
	assert.Equal(t, 3, o.DB)
	assert.True(t, o.ContextTimeoutEnabled)

	o, err = parseSentinelURL("redis+sentinel://h:1/m")
	require.NoError(t, err)
	assert.Equal(t, []string{"h:1"}, o.SentinelAddrs)
	assert.Zero(t, o.DB)
	assert.Empty(t, o.Password)
}

// In LOCK_DISTRIBUTED_NODES the commas between sentinel hosts belong to
// the sentinel URL; the next piece with a scheme starts the next node.
func TestSentinelURLInTheList(t *testing.T) {
	c, err := Load(vars(map[string]string{VarNodes: "redis://10.0.1.1:6379, redis+sentinel://10.0.0.1, 10.0.0.2:26380/mymaster,redis://10.0.1.2:6379,redis+sentinel://:a,b@10.0.0.3/other/1"}))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"redis://10.0.1.1:6379",
		"redis+sentinel://10.0.0.1,10.0.0.2:26380/mymaster",
		"redis://10.0.1.2:6379",
		"redis+sentinel://:a,b@10.0.0.3/other/1",
	}, c.Nodes)
}

func TestSentinelURLMalformed(t *testing.T) {
	for _, v := range []string{
		"redis+sentinel://10.0.0.1:26379",           // no master name
		"redis+sentinel://10.0.0.1:26379/",          // empty master name
		"redis+sentinel:///mymaster",                // no hosts
		"redis+sentinel://,/mymaster",               // empty hosts
		"redis+sentinel://10.0.0.1:x/mymaster",      // bad port
		"redis+sentinel://10.0.0.1:0/mymaster",      // port 0
		"redis+sentinel://10.0.0.1:65536/mymaster",  // port too large
		"redis+sentinel://:26379/mymaster",          // no host
		"redis+sentinel://h/mymaster/x",             // bad db
		"redis+sentinel://h/mymaster/-1",            // negative db
		"redis+sentinel://h/mymaster?db=1",          // query
		"redis+sentinel://h/mymaster,10.0.0.2:6379", // a plain node without its scheme
		"redis+sentinel://u:%zz@h/mymaster",         // bad escape
	} {
		_, err := Load(vars(map[string]string{VarNodes: v}))
		assert.ErrorIs(t, err, redlock.ErrInvalid, v)
		var e *Error
		if assert.ErrorAs(t, err, &e, v) {
			assert.Equal(t, VarNodes, e.Var)
		}
	}
}

// A sentinel URL's password shows in no error, however the URL is broken.
func TestSentinelURLErrorsHidePasswords(t *testing.T) {
	enc := url.UserPassword("alice", secret).String()
	for _, v := range []string{
		"redis+sentinel://" + enc + "@h:x/m",
		"redis+sentinel://" + enc + "@h",
		"redis+sentinel://alice:" + secret + "@h/m/x",  // unescaped '/' in the password
		"redis+sentinel://alice:" + secret + "%zz@h/m", // bad escape
		"redis+sentinel://alice:pa55,w0rd@h:1:2/m",     // a comma in the password
		"redis+sentinel://alice:pa55@w0rd@h/m?x=1",     // an unescaped '@'
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
	u := "redis+sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + redisserver.MasterName
	c, err := Load(vars(map[string]string{VarEnabled: "true", VarStrategy: "reject", VarTTL: "5", VarNodes: u}))
	require.NoError(t, err)
	l, closer, err := c.Open()
	require.NoError(t, err)
	defer closer.Close()
	assert.IsType(t, &redlock.Single{}, l)

	lk, err := l.Lock(t.Context(), "order:1")
	require.NoError(t, err)
	_, err = l.Lock(t.Context(), "order:1")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	master, err := topo.MasterAddr()
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), redistest.Client(t, master).Get(t.Context(), "order:1").Val())
	require.NoError(t, lk.Unlock(t.Context()))

	rev := topo.SentinelAddrs()
	rev[0], rev[2] = rev[2], rev[0]
	c.Nodes = []string{u, "redis+sentinel://" + strings.Join(rev, ",") + "/" + redisserver.MasterName}
	_, _, err = c.Open()
	assert.ErrorIs(t, err, redlock.ErrInvalid, "one master through the same sentinels, twice")
}
