package goredis

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sentinelFaults is a master, its replica and three sentinels as the
// Sentinel scenarios drive them: redis-server processes (processSentinel)
// or compose containers (topology_docker_test.go).
type sentinelFaults interface {
	SentinelAddrs() []string
	// masterAddr and replicaAddr are the data nodes as started.
	masterAddr() string
	replicaAddr() string
	killMaster(t *testing.T)
	pauseReplica(t *testing.T)
	resumeReplica(t *testing.T)
	WaitFailover(ctx context.Context, old string) (string, error)
}

// processSentinel drives the topology of redis-server processes.
type processSentinel struct{ *redisserver.Sentinel }

func startProcessSentinel(t *testing.T) sentinelFaults {
	return processSentinel{redistest.StartSentinel(t)}
}
func (p processSentinel) masterAddr() string         { return p.Data[0].Addr() }
func (p processSentinel) replicaAddr() string        { return p.Data[1].Addr() }
func (p processSentinel) killMaster(t *testing.T)    { require.NoError(t, p.Data[0].Kill()) }
func (p processSentinel) pauseReplica(t *testing.T)  { require.NoError(t, p.Data[1].Pause()) }
func (p processSentinel) resumeReplica(t *testing.T) { require.NoError(t, p.Data[1].Resume()) }

// failoverNode is a node over a fresh failover client of the topology's
// master (another process, as far as the servers can tell).
func failoverNode(t testing.TB, topo interface{ SentinelAddrs() []string }, opts ...Option) *Node {
	t.Helper()
	c := redistest.FailoverClient(t, topo.SentinelAddrs()...)
	return adapt(t, c, append([]Option{WithFailover(failoverOptions(topo.SentinelAddrs()...))}, opts...)...)
}

func failoverOptions(addrs ...string) *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: redisserver.MasterName, SentinelAddrs: addrs, ContextTimeoutEnabled: true}
}

func TestFailoverName(t *testing.T) {
	mk := func(addrs ...string) *redis.Client {
		c := redis.NewFailoverClient(failoverOptions(addrs...))
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := mk("127.0.0.1:2", "127.0.0.1:1")
	_, err := New(c)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a failover client without WithFailover")

	a := adapt(t, c, WithFailover(failoverOptions("127.0.0.1:2", "127.0.0.1:1")))
	assert.Equal(t, driver.Info{Name: "sentinel[mymaster@127.0.0.1:1 127.0.0.1:2]"}, a.Info())
	b := adapt(t, mk("127.0.0.1:1", "127.0.0.1:2"), WithFailover(failoverOptions("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1")))
	assert.Equal(t, a.Info(), b.Info(), "the same master and sentinels, listed in another order")
	_, err = redlock.New([]driver.Node{a, b, standalone(t)})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two failover clients of one master are one node")

	_, err = New(redistest.Client(t, "127.0.0.1:1"), WithFailover(failoverOptions("127.0.0.1:1")))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "WithFailover for a plain client")
	_, err = New(c, WithFailover(nil))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "WithFailover(nil)")
	plain, err := New(redistest.Client(t, "127.0.0.1:1"), WithFailover(nil))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "WithFailover(nil) with a plain client")
	assert.Nil(t, plain)
	_, err = New(c, WithFailover(&redis.FailoverOptions{SentinelAddrs: []string{"127.0.0.1:1"}}))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "no master name")
	_, err = New(c, WithFailover(&redis.FailoverOptions{MasterName: "m"}))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "no sentinel")
	nt := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { nt.Close() })
	_, err = New(nt, WithFailover(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "without ContextTimeoutEnabled")
}

func TestReplicaAckOptionChecks(t *testing.T) {
	c := redistest.Client(t, "127.0.0.1:1")
	for _, o := range []Option{WithReplicaAck(0, time.Second), WithReplicaAck(1, 0), WithReplicaAck(1, time.Microsecond)} {
		_, err := New(c, o)
		assert.ErrorIs(t, err, redlock.ErrInvalid)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	_, err := New(ring, WithReplicaAck(1, time.Second))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a ring client: which master's replicas?")
	n := adapt(t, redistest.ClusterClient(t, "127.0.0.1:1"), WithReplicaAck(1, time.Second))
	assert.Equal(t, driver.Info{Name: "cluster[127.0.0.1:1]", Cluster: true, ReplicaAck: true}, n.Info(),
		"a cluster client: WAIT goes to the master of each key's slot")
	n = adapt(t, c, WithReplicaAck(1, time.Second))
	assert.Equal(t, driver.Info{Name: "127.0.0.1:1", ReplicaAck: true}, n.Info())
	assert.False(t, adapt(t, c).Info().ReplicaAck)
}

// TestReplicaAckWithoutReplicas: on a master without replicas every
// script call runs, and fails with ErrReplicaAck once its WAIT timed out;
// a script's error reply is that error, not an acknowledgement failure. A
// locker counts the node's vote as failed and rolls the acquisition back.
func TestReplicaAckWithoutReplicas(t *testing.T) {
	addr := redistest.Start(t, 1).Servers[0].Addr()
	rc := redistest.Client(t, addr)
	b := adapt(t, rc, WithReplicaAck(1, 20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()

	for i := range 2 { // NOSCRIPT and EVAL, then EVALSHA
		got, err := b.Eval(ctx, counting, []string{"ack:n"})
		assert.ErrorIs(t, err, ErrReplicaAck, "call %d", i)
		assert.Nil(t, got)
		assert.Equal(t, strconv.Itoa(i+1), rc.Get(ctx, "ack:n").Val(), "the script ran, once per call")
	}
	_, err := b.Eval(ctx, driver.NewScript("fail", `return redis.error_reply("MYCODE refused")`), []string{"ack:e"})
	require.ErrorContains(t, err, "MYCODE refused")
	assert.NotErrorIs(t, err, ErrReplicaAck)

	l := newSingle(t, b, redlock.WithStrategy(redlock.Reject()))
	_, err = l.Lock(ctx, "ack:l")
	assert.ErrorIs(t, err, redlock.ErrUnavailable)
	assertAckFailed(t, err)
	assert.Zero(t, rc.Exists(ctx, "ack:l").Val(), "rolled back")
}

// TestConformanceSentinel runs the suite against a failover client of the
// sentinel topology, with every script call acknowledged by the replica.
// Stall pauses every process (sentinels first, so no failover starts):
// the node stops answering.
func TestConformanceSentinel(t *testing.T) {
	topo := redistest.StartSentinel(t)
	stall := slices.Clone(topo.Servers)
	slices.Reverse(stall)
	drivertest.Run(t, func(t *testing.T) drivertest.Target {
		return drivertest.Target{Node: failoverNode(t, topo, WithReplicaAck(1, time.Second)), Stall: pause(t, stall...)}
	})
}

// assertAckFailed asserts that err is a QuorumError whose one node failed
// for want of replica acknowledgement (the vote failed).
func assertAckFailed(t *testing.T, err error) {
	t.Helper()
	var qe *redlock.QuorumError
	if assert.ErrorAs(t, err, &qe) && assert.Len(t, qe.Failed, 1) {
		assert.ErrorIs(t, qe.Failed[0].Err, ErrReplicaAck, "the node's vote failed: too few replicas acknowledged")
	}
}

// scenarioLocker is a Single over a fresh failover client: a long TTL, so
// that the first holder's lock is still valid whatever the failover costs.
func scenarioLocker(t *testing.T, topo sentinelFaults, opts ...Option) *redlock.Redlock {
	return newSingle(t, failoverNode(t, topo, opts...), redlock.WithTTL(time.Minute),
		redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(2*time.Second))
}

// cutReplication freezes the replica (SIGSTOP) and drops its replication
// link on the master, so no write reaches it from now on: the frozen
// replica cannot reconnect, and what the master writes next is in no
// socket buffer of the replica's.
func cutReplication(t *testing.T, ctx context.Context, topo sentinelFaults) {
	topo.pauseReplica(t)
	n, err := redistest.Client(t, topo.masterAddr()).ClientKillByFilter(ctx, "TYPE", "replica").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the replica's link")
}

// failover kills the master (SIGKILL, or docker kill), resumes the
// replica and waits until the sentinels promote it.
func failover(t *testing.T, ctx context.Context, topo sentinelFaults) {
	topo.killMaster(t)
	topo.resumeReplica(t)
	addr, err := topo.WaitFailover(ctx, topo.masterAddr())
	require.NoError(t, err)
	require.Equal(t, topo.replicaAddr(), addr, "the replica is the new master")
}

// TestSentinelFailoverWithoutReplicaAck shows the hazard of asynchronous
// replication: A's lock, granted by the master, never reached the
// replica; the master dies, the replica is promoted without the key, and
// B is granted the same key while A's lock is still valid. Both hold it.
func TestSentinelFailoverWithoutReplicaAck(t *testing.T) {
	sentinelFailoverWithoutReplicaAck(t, startProcessSentinel)
}

func sentinelFailoverWithoutReplicaAck(t *testing.T, start func(*testing.T) sentinelFaults) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topo := start(t)
	a := scenarioLocker(t, topo)
	cutReplication(t, ctx, topo)

	lockA, err := a.Lock(ctx, "sentinel:k")
	require.NoError(t, err, "granted by the master alone: nothing waits for the replica")
	assert.Equal(t, lockA.Token(), redistest.Client(t, topo.masterAddr()).Get(ctx, "sentinel:k").Val())

	failover(t, ctx, topo)
	b := scenarioLocker(t, topo)
	lockB, err := b.Lock(ctx, "sentinel:k")
	require.NoError(t, err, "the promoted replica never had A's key")
	assert.True(t, time.Now().Before(lockA.Until()), "A's lock is still valid: both hold sentinel:k (the overlap)")
	assert.NotEqual(t, lockA.Token(), lockB.Token())
	assert.Equal(t, lockB.Token(), redistest.Client(t, topo.replicaAddr()).Get(ctx, "sentinel:k").Val())
}

// TestSentinelFailoverWithReplicaAck: with WithReplicaAck(1, …) a lock
// is granted only once the replica has it. With replication cut, A is
// refused (its vote fails, the write is rolled back) and no lock exists;
// with the replica healthy, A's lock survives the master's death and the
// replica's promotion, and B is refused while it is valid (acknowledged,
// its vote fails: the new master has no replica).
func TestSentinelFailoverWithReplicaAck(t *testing.T) {
	sentinelFailoverWithReplicaAck(t, startProcessSentinel)
}

func sentinelFailoverWithReplicaAck(t *testing.T, start func(*testing.T) sentinelFaults) {
	ack := WithReplicaAck(1, 500*time.Millisecond)
	t.Run("ReplicaCutOff", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topo := start(t)
		a := scenarioLocker(t, topo, ack)
		cutReplication(t, ctx, topo)
		_, err := a.Lock(ctx, "sentinel:k")
		require.ErrorIs(t, err, redlock.ErrUnavailable)
		assertAckFailed(t, err)
		assert.Zero(t, redistest.Client(t, topo.masterAddr()).Exists(ctx, "sentinel:k").Val(),
			"the write was rolled back on the master")
		topo.resumeReplica(t)
	})
	t.Run("ReplicaHealthy", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		topo := start(t)
		a := scenarioLocker(t, topo, ack)
		lockA, err := a.Lock(ctx, "sentinel:k")
		require.NoError(t, err)

		failover(t, ctx, topo)
		assert.Equal(t, lockA.Token(), redistest.Client(t, topo.replicaAddr()).Get(ctx, "sentinel:k").Val(),
			"the promoted replica has A's key")
		b := scenarioLocker(t, topo)
		_, err = b.Lock(ctx, "sentinel:k")
		assert.ErrorIs(t, err, redlock.ErrNotAcquired, "B finds A's key on the new master")
		// The new master has no replica left: an acknowledged call fails,
		// a refusal too, and B is not granted the lock either way.
		bAck := scenarioLocker(t, topo, ack)
		_, err = bAck.Lock(ctx, "sentinel:k")
		assertAckFailed(t, err)
		assert.True(t, time.Now().Before(lockA.Until()), "while A's lock is valid")
		assert.Equal(t, lockA.Token(), redistest.Client(t, topo.replicaAddr()).Get(ctx, "sentinel:k").Val(),
			"A's key untouched by B's attempts")
	})
}
