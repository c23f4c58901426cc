package envconfig

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReplicaAckParams: the replica_ack parameters are taken out of a
// URL, every other byte left as it was for go-redis.
func TestReplicaAckParams(t *testing.T) {
	for _, tt := range []struct {
		in, rest string
		ack      replicaAck
	}{
		{"redis://h:1", "redis://h:1", replicaAck{}},
		{"redis://h:1?dial_timeout=3s", "redis://h:1?dial_timeout=3s", replicaAck{}},
		{"redis://h:1?replica_ack=1&replica_ack_timeout=500ms", "redis://h:1", replicaAck{1, 500 * time.Millisecond}},
		{"redis://h:1?dial_timeout=3s&replica_ack=2&replica_ack_timeout=1s&read_timeout=2s",
			"redis://h:1?dial_timeout=3s&read_timeout=2s", replicaAck{2, time.Second}},
		{"redis+sentinel://s?master_name=m&addr=s2:1&replica_ack_timeout=1m30s&replica_ack=3",
			"redis+sentinel://s?master_name=m&addr=s2:1", replicaAck{3, 90 * time.Second}},
		{"redis://h:1?replica%5Fack=1&replica_ack_timeout=1ms#frag", "redis://h:1#frag", replicaAck{1, time.Millisecond}},
		{"redis://h:1#?replica_ack=1", "redis://h:1#?replica_ack=1", replicaAck{}}, // a fragment, not a query
	} {
		rest, ack, err := splitReplicaAck(tt.in)
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.rest, rest, tt.in)
		assert.Equal(t, tt.ack, ack, tt.in)
	}
}

// TestReplicaAckParamsMalformed: every bad replica_ack value is an
// *Error for NODES from Load, naming the parameter and never the
// password.
func TestReplicaAckParamsMalformed(t *testing.T) {
	for _, q := range []string{
		"replica_ack=1",                                               // no timeout
		"replica_ack_timeout=1s",                                      // no count
		"replica_ack=0&replica_ack_timeout=1s",                        // none: leave both out
		"replica_ack=-1&replica_ack_timeout=1s",                       // negative
		"replica_ack=one&replica_ack_timeout=1s",                      // not a number
		"replica_ack=1.5&replica_ack_timeout=1s",                      // not whole
		"replica_ack=&replica_ack_timeout=1s",                         // empty
		"replica_ack=1&replica_ack=2&replica_ack_timeout=1s",          // twice
		"replica_ack=1&replica_ack_timeout=500",                       // no unit
		"replica_ack=1&replica_ack_timeout=0ms",                       // zero
		"replica_ack=1&replica_ack_timeout=500us",                     // under 1ms
		"replica_ack=1&replica_ack_timeout=-1s",                       // negative
		"replica_ack=1&replica_ack_timeout=1s&replica_ack_timeout=2s", // twice
	} {
		for _, u := range []string{
			"redis://h:1?" + q,
			"redis://alice:" + url.PathEscape(secret) + "@h:1?" + q,
			"redis+sentinel://alice:" + url.PathEscape(secret) + "@s?master_name=m&" + q,
			"redis+cluster://h:1?" + q,
		} {
			_, err := Load(vars(map[string]string{VarNodes: "redis://other:2," + u}))
			require.Error(t, err, u)
			assert.ErrorIs(t, err, redlock.ErrInvalid, u)
			var ee *Error
			require.ErrorAs(t, err, &ee, u)
			assert.Equal(t, VarNodes, ee.Var)
			assert.Contains(t, err.Error(), "replica_ack", u)
			assertNoSecret(t, err, "pa55", "w0rd", "alice")
		}
	}
}

// TestReplicaAckNodes: the parameters reach Node for every kind of URL,
// and go-redis parses the rest of the URL with its own options.
func TestReplicaAckNodes(t *testing.T) {
	const ack = "replica_ack=2&replica_ack_timeout=250ms"
	parse := func(u string) Node {
		t.Helper()
		n, err := parseNode(u)
		require.NoError(t, err)
		assert.Equal(t, 2, n.ReplicaAck, u)
		assert.Equal(t, 250*time.Millisecond, n.ReplicaAckTimeout, u)
		return n
	}
	n := parse("redis://h:1/2?dial_timeout=3s&" + ack)
	require.NotNil(t, n.Standalone)
	assert.Equal(t, 2, n.Standalone.DB)
	assert.Equal(t, 3*time.Second, n.Standalone.DialTimeout)
	assert.Equal(t, []string{"dial_timeout"}, n.Params, "this package's parameters are not go-redis's")

	n = parse("redis+sentinel://s?master_name=m&addr=s2:26380&" + ack)
	require.NotNil(t, n.Sentinel)
	assert.Equal(t, "m", n.Sentinel.MasterName)
	assert.Equal(t, []string{"s:26379", "s2:26380"}, n.Sentinel.SentinelAddrs)
	assert.Equal(t, []string{"addr", "master_name"}, n.Params)

	n = parse("redis+cluster://h:7000?addr=h2:7001&" + ack)
	require.NotNil(t, n.Cluster)
	assert.Equal(t, []string{"h:7000", "h2:7001"}, n.Cluster.Addrs)

	n, err := parseNode("redis://h:1")
	require.NoError(t, err)
	assert.Zero(t, n.ReplicaAck, "no parameters, no acknowledgement")
	assert.Empty(t, n.Params)
}

// TestReplicaAckOnClusterIsGoRedisAnswer: a redis+cluster:// URL with
// replica_ack opens as goredis.New answers for a cluster client with
// WithReplicaAck (goredis accepts it for clusters, so Open succeeds; a
// refusal there would be Open's error): envconfig passes the request on
// and adds no rule of its own.
func TestReplicaAckOnClusterIsGoRedisAnswer(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer cc.Close()
	_, want := goredis.New(cc, goredis.WithReplicaAck(1, time.Second))

	c := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second,
		Nodes: []string{"redis+cluster://127.0.0.1:1?replica_ack=1&replica_ack_timeout=1s"}}
	_, closer, err := c.Open()
	if want == nil {
		require.NoError(t, err)
		require.NoError(t, closer.Close())
		return
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	var ee *Error
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, VarNodes, ee.Var)
	assert.Contains(t, err.Error(), want.Error(), "goredis's own words")
}

// TestReplicaAckWithoutReplicas: a master without replicas cannot
// acknowledge, so a node whose URL asks for replica_ack=1 refuses every
// lock (goredis.ErrReplicaAck) and keeps no key, while the same URL
// without the parameters locks: the parameters reach goredis.
func TestReplicaAckWithoutReplicas(t *testing.T) {
	addr := redistest.Start(t, 1).Addrs()[0]
	open := func(u string) redlock.Locker {
		l, closer, err := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Minute, Nodes: []string{u}}.Open()
		require.NoError(t, err)
		t.Cleanup(func() { closer.Close() })
		return l
	}
	acked := open("redis://" + addr + "?replica_ack=1&replica_ack_timeout=20ms")
	_, err := acked.Lock(t.Context(), "order:1")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Failed, 1)
	assert.ErrorIs(t, qe.Failed[0].Err, goredis.ErrReplicaAck, "no replica acknowledged")
	assert.Zero(t, redistest.Client(t, addr).Exists(t.Context(), "order:1").Val(), "rolled back")

	l, err := open("redis://"+addr).Lock(t.Context(), "order:1")
	require.NoError(t, err, "without replica_ack the master grants alone")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestReplicaAckSentinel: through Sentinel (a master and one replica),
// replica_ack=1 grants a lock that is on the replica when Lock returns
// (WAIT counted its acknowledgement), so a failover to it would keep the
// lock; replica_ack=2 can never be met, and refuses every lock (its WAIT
// timeout well inside the per-node timeout, or the node times out first).
func TestReplicaAckSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	master, err := s.MasterAddr()
	require.NoError(t, err)
	replica := s.Data[1].Addr()
	require.NotEqual(t, master, replica, "no failover happened")
	sentinels := s.SentinelAddrs()
	open := func(replicas int, timeout string) redlock.Locker {
		u := fmt.Sprintf("redis+sentinel://%s?master_name=%s&addr=%s&addr=%s&replica_ack=%d&replica_ack_timeout=%s",
			sentinels[0], redisserver.MasterName, sentinels[1], sentinels[2], replicas, timeout)
		l, closer, err := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Minute, Nodes: []string{u}}.Open()
		require.NoError(t, err)
		t.Cleanup(func() { closer.Close() })
		return l
	}

	lk, err := open(1, "1s").Lock(t.Context(), "order:1")
	require.NoError(t, err)
	assert.Equal(t, lk.Token(), redistest.Client(t, replica).Get(t.Context(), "order:1").Val(), "acknowledged by the replica")
	require.NoError(t, lk.Unlock(t.Context()))

	_, err = open(2, "50ms").Lock(t.Context(), "order:2")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Failed, 1)
	assert.ErrorIs(t, qe.Failed[0].Err, goredis.ErrReplicaAck, "one replica cannot make two acknowledgements")
}
