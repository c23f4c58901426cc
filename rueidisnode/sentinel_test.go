package rueidisnode

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sentinelOption is the options of a rueidis client of the master that
// the sentinels at sentinels monitor.
func sentinelOption(sentinels []string, change ...func(*rueidis.ClientOption)) rueidis.ClientOption {
	return clientOption(sentinels, append([]func(*rueidis.ClientOption){func(o *rueidis.ClientOption) {
		o.Sentinel.MasterSet = redisserver.MasterName
	}}, change...)...)
}

// sentinelNode is the node of a fresh sentinel client.
func sentinelNode(t *testing.T, topo *redisserver.Sentinel, opts ...Option) *Node {
	t.Helper()
	return described(t, sentinelOption(topo.SentinelAddrs()), opts...)
}

// TestSentinel runs the adapter over a master, its replica and three
// sentinels, shared by the subtests that leave the topology as it is.
func TestSentinel(t *testing.T) {
	topo := redistest.StartSentinel(t)
	t.Run("Name", func(t *testing.T) { sentinelName(t, topo) })
	t.Run("Primitives", func(t *testing.T) { primitives(t, []driver.Node{sentinelNode(t, topo)}) })
	t.Run("Conformance", func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) drivertest.Target { return drivertest.Target{Node: sentinelNode(t, topo)} })
	})
	t.Run("ReplicaAck", func(t *testing.T) {
		t.Run("sentinel", func(t *testing.T) { ackOn(t, topo, sentinelNode(t, topo, WithReplicaAck(1, 300*time.Millisecond))) })
		t.Run("standalone", func(t *testing.T) {
			ackOn(t, topo, serverNode(t, topo.Data[0].Addr()).withAck(t, 1, 300*time.Millisecond))
		})
	})
	t.Run("ReplicaAckNeverResends", func(t *testing.T) { replicaAckNeverResends(t, topo) })
}

// withAck is New over n's client again, with WithReplicaAck.
func (n *Node) withAck(t *testing.T, replicas int, timeout time.Duration) *Node {
	return adapt(t, n.c, WithReplicaAck(replicas, timeout))
}

// sentinelName: the node is named after the master and its sentinels, as
// goredis names a failover client's node, so that a Redlock refuses the
// two as one node; without WithClientOption, or with options that do not
// suit a lock, a sentinel client is refused.
func sentinelName(t *testing.T, topo *redisserver.Sentinel) {
	addrs := topo.SentinelAddrs()
	r := described(t, sentinelOption([]string{addrs[2], addrs[0], addrs[1]}))
	fo := &redis.FailoverOptions{MasterName: redisserver.MasterName, SentinelAddrs: addrs}
	g := goredisNode(t, redistest.FailoverClient(t, addrs...), goredis.WithFailover(fo))
	assert.Equal(t, "sentinel"+sortedList(addrs, "["+redisserver.MasterName+"@", "]"), r.Info().Name)
	assert.Equal(t, g.Info(), r.Info(), "one master, one node, whichever the adapter")
	_, err := redlock.New([]driver.Node{r, g, serverNode(t, redistest.Start(t, 1).Addrs()[0])})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two clients of one master are one node")

	c := newClient(t, sentinelOption(addrs))
	_, err = New(c)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a sentinel client without WithClientOption")
	for name, change := range map[string]func(*rueidis.ClientOption){
		"ConnLifetime":  func(o *rueidis.ClientOption) { o.ConnLifetime = time.Hour },
		"ReplicaOnly":   func(o *rueidis.ClientOption) { o.ReplicaOnly = true },
		"no master set": func(o *rueidis.ClientOption) { o.Sentinel.MasterSet = "" },
	} {
		opt := sentinelOption(addrs)
		change(&opt)
		_, err := New(c, WithClientOption(opt))
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
}

// ackOn: with WithReplicaAck, a script and its WAIT go to the
// master on one connection; with the replica healthy the script succeeds
// and the replica has its write as the call returns; with the replica
// frozen (SIGSTOP) the call fails with ErrReplicaAck once WAIT timed out,
// though the script ran, and a locker's acquisition fails and is rolled
// back.
func ackOn(t *testing.T, topo *redisserver.Sentinel, n *Node) {
	require.True(t, n.Info().ReplicaAck)
	master, replica := direct(t, topo.Data[0].Addr()), direct(t, topo.Data[1].Addr())
	_, err := n.Eval(t.Context(), counting, []string{fresh("ack:warm")}) // the script known: one WAIT per call
	require.NoError(t, err)
	key := fresh("ack")
	waits := redistest.Calls(t, master, "wait")
	got, err := n.Eval(t.Context(), counting, []string{key})
	require.NoError(t, err)
	assert.Equal(t, int64(1), got)
	assert.Equal(t, waits+1, redistest.Calls(t, master, "wait"), "one WAIT")
	assert.Equal(t, "1", replica.Get(t.Context(), key).Val(), "the replica has the write as the call returns")

	require.NoError(t, topo.Data[1].Pause())
	defer func() { require.NoError(t, topo.Data[1].Resume()) }()
	got, err = n.Eval(t.Context(), counting, []string{key})
	require.ErrorIs(t, err, ErrReplicaAck)
	assert.Nil(t, got)
	assert.Equal(t, "2", master.Get(t.Context(), key).Val(), "the script ran, once")

	s := newSingle(t, n, redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(2*time.Second))
	_, err = s.Lock(t.Context(), key+":lock")
	require.Error(t, err, "no replica acknowledged the grant")
	assert.Zero(t, master.Exists(t.Context(), key+":lock").Val(), "and it was rolled back")
}

// replicaAckNeverResends: with WithReplicaAck, a script whose reply is
// lost after it ran is an error, not resent, as without.
func replicaAckNeverResends(t *testing.T, topo *redisserver.Sentinel) {
	loser := &replyLoser{}
	n := serverNode(t, topo.Data[0].Addr(), quiet, loser.option).withAck(t, 1, time.Second)
	master := direct(t, topo.Data[0].Addr())
	_, err := n.Eval(t.Context(), counting, []string{fresh("lost:warm")}) // the script known, the connection pooled
	require.NoError(t, err)
	key := fresh("lost")
	evalsha := redistest.Calls(t, master, "evalsha")
	loser.left.Store(1)
	_, err = n.Eval(t.Context(), counting, []string{key})
	require.Error(t, err, "the reply was lost: the outcome is unknown")
	assert.Equal(t, evalsha+1, redistest.Calls(t, master, "evalsha"), "EVALSHA once")
	assert.Equal(t, "1", master.Get(t.Context(), key).Val(), "the script ran once")
	got, err := n.Eval(t.Context(), counting, []string{key})
	require.NoError(t, err, "works again")
	assert.Equal(t, int64(2), got)
}

// TestSentinelFollowsFailover: the node is the master whichever server it
// is: after the master dies and the sentinels promote the replica, locks
// taken through the same node land on the new master, and a waiter
// subscribed before the failover is told that a message may have been
// missed once its subscription is active on the new master, and then
// hears messages there.
func TestSentinelFollowsFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	topo := redistest.StartSentinel(t)
	n := sentinelNode(t, topo)
	s := newSingle(t, n, redlock.WithStrategy(redlock.Reject()))
	heard := make(chan string, 16)
	stop, err := n.Subscribe(ctx, func(p string) {
		select {
		case heard <- p:
		default:
		}
	}, "sentinel:waited")
	require.NoError(t, err)
	defer stop()

	master, replica := topo.Data[0], topo.Data[1]
	require.NoError(t, master.Kill())
	addr, err := topo.WaitFailover(ctx, master.Addr())
	require.NoError(t, err)
	require.Equal(t, replica.Addr(), addr, "the replica is the new master")

	var l *redlock.Lock
	testwait.Until(t, "a lock granted after the failover", func() bool {
		l, err = s.Lock(ctx, "sentinel:after")
		return err == nil
	})
	d := direct(t, replica.Addr())
	assert.Equal(t, l.Token(), d.Get(ctx, "sentinel:after").Val(), "on the new master")
	require.NoError(t, l.Unlock(ctx))
	select {
	case p := <-heard:
		assert.Empty(t, p, "a message may have been missed: payload \"\"")
	case <-ctx.Done():
		t.Fatal("the waiter was not told that its subscription moved")
	}
	testwait.Until(t, "a message on the new master heard", func() bool {
		require.NoError(t, d.Publish(ctx, "sentinel:waited", "there").Err())
		select {
		case p := <-heard:
			return p == "there"
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
}
