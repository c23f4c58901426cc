package rueidisnode

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCluster runs the adapter over one Redis Cluster of three masters
// with a replica each, shared by its subtests (each uses keys of its
// own): starting a cluster costs seconds.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	seeds := cl.Addrs()[:3]
	t.Run("Name", func(t *testing.T) { clusterName(t, seeds) })
	t.Run("KeysOnTheWire", func(t *testing.T) { clusterKeys(t, seeds) })
	t.Run("Primitives", func(t *testing.T) { primitives(t, []driver.Node{clusterNode(t, seeds)}) })
	t.Run("Conformance", func(t *testing.T) {
		drivertest.Run(t, func(t *testing.T) drivertest.Target { return drivertest.Target{Node: clusterNode(t, seeds)} })
	})
	t.Run("RedlockContention", func(t *testing.T) { clusterRedlockContention(t, seeds) })
	t.Run("Handoff", func(t *testing.T) { clusterHandoff(t, cl, seeds) })
	t.Run("InteropWithGoRedis", func(t *testing.T) { clusterInterop(t, seeds) })
	t.Run("NeverResends", func(t *testing.T) { clusterNeverResends(t, seeds) })
	t.Run("ReplicaAck", func(t *testing.T) { clusterReplicaAck(t, cl, seeds) })
	t.Run("SlotMoved", func(t *testing.T) { clusterSlotMoved(t, seeds) }) // last: it reassigns a slot
}

// clusterNode is the node of a fresh cluster client seeded with seeds.
func clusterNode(t *testing.T, seeds []string, opts ...Option) *Node {
	t.Helper()
	return clusterNodeWith(t, clientOption(seeds), opts...)
}

func clusterNodeWith(t *testing.T, opt rueidis.ClientOption, opts ...Option) *Node {
	t.Helper()
	n := described(t, opt, opts...)
	require.True(t, n.Info().Cluster, "a cluster client makes a cluster node")
	return n
}

// clusterName: the node of a cluster has goredis's name for a client with
// the same seeds, in any order, so a Redlock refuses the two as one node
// counted twice; without WithClientOption, or with options that do not
// suit a lock, a cluster client is refused.
func clusterName(t *testing.T, seeds []string) {
	r := clusterNode(t, []string{seeds[2], seeds[0], seeds[1], seeds[0]})
	g := goredisNode(t, redistest.ClusterClient(t, seeds...))
	assert.Equal(t, "cluster"+sortedList(seeds, "[", "]"), r.Info().Name)
	assert.Equal(t, g.Info(), r.Info(), "one cluster, one node, whichever the adapter")
	_, err := redlock.New([]driver.Node{r, g, serverNode(t, redistest.Start(t, 1).Addrs()[0])})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two clients of one cluster are one node")

	c := newClient(t, clientOption(seeds))
	_, err = New(c)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a cluster client without WithClientOption")
	for name, change := range map[string]func(*rueidis.ClientOption){
		"ConnLifetime":   func(o *rueidis.ClientOption) { o.ConnLifetime = time.Hour },
		"SendToReplicas": func(o *rueidis.ClientOption) { o.SendToReplicas = func(rueidis.Completed) bool { return false } },
		"sentinel":       func(o *rueidis.ClientOption) { o.Sentinel.MasterSet = "mymaster" },
	} {
		opt := clientOption(seeds)
		change(&opt)
		_, err := New(c, WithClientOption(opt))
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
}

// clusterKeys: through the node, the core keeps a key without a hash tag
// in braces, its fence counter in its slot, as through goredis.
func clusterKeys(t *testing.T, seeds []string) {
	s := newSingle(t, clusterNode(t, seeds), redlock.WithFencing())
	cc := redistest.ClusterClient(t, seeds...)
	key := fresh("wire")
	l, err := s.Lock(t.Context(), key)
	require.NoError(t, err)
	assert.Equal(t, l.Token(), cc.Get(t.Context(), "{"+key+"}").Val(), "the key in braces")
	assert.Zero(t, cc.Exists(t.Context(), key).Val(), "not the bare key")
	require.NoError(t, l.Unlock(t.Context()))
	_, err = s.Lock(t.Context(), "order:{}")
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a key whose names cannot share a slot")
}

// mixedNodes is a Redlock's nodes: the cluster and two standalone masters.
func mixedNodes(t *testing.T, seeds []string) []driver.Node {
	masters := redistest.Start(t, 2).Addrs()
	return []driver.Node{clusterNode(t, seeds), serverNode(t, masters[0]), serverNode(t, masters[1])}
}

// clusterRedlockContention: goroutines increment a counter non-atomically
// under a fenced Redlock of the cluster and two standalone masters, on a
// key with a hash tag and one without: no update is lost, and fencing
// tokens go up strictly from holder to holder.
func clusterRedlockContention(t *testing.T, seeds []string) {
	r := newRedlock(t, mixedNodes(t, seeds), redlock.WithTTL(5*time.Second), redlock.WithFencing(),
		redlock.WithStrategy(redlock.Retry(60, 2*time.Millisecond)))
	for _, key := range []string{fresh("counter"), "counter:{" + fresh("t") + "}"} {
		var fences []int64
		locktest.Counter(t, r, key, 6, 15, func(l *redlock.Lock) { fences = append(fences, l.Fence()) })
		for i := 1; i < len(fences); i++ {
			if fences[i] <= fences[i-1] {
				t.Fatalf("%s: holder %d got fence %d after holder %d's %d", key, i, fences[i], i-1, fences[i-1])
			}
		}
	}
}

// clusterHandoff: waiters are woken by releases heard over SSUBSCRIBE, on
// the cluster alone (where nothing else can wake them) and in a Redlock
// of the cluster and two standalone masters. While one waits, the
// cluster has a sharded subscription of the key's channels and no plain
// one.
func clusterHandoff(t *testing.T, cl *redisserver.Cluster, seeds []string) {
	t.Run("single", func(t *testing.T) {
		obs, refused := contention()
		s := newSingle(t, clusterNode(t, seeds), redlock.WithTTL(time.Minute), obs)
		key := fresh("handoff")
		handedOff(t, s, s, refused, key, func() {
			var sharded, plain int
			for _, addr := range cl.Addrs() {
				d := direct(t, addr)
				sharded += len(d.PubSubShardChannels(t.Context(), "*"+key+"*").Val())
				plain += len(d.PubSubChannels(t.Context(), "*"+key+"*").Val())
			}
			assert.NotZero(t, sharded, "SSUBSCRIBE of the key's channels")
			assert.Zero(t, plain, "no SUBSCRIBE")
		})
	})
	t.Run("redlock", func(t *testing.T) {
		obs, refused := contention()
		r := newRedlock(t, mixedNodes(t, seeds), redlock.WithTTL(time.Minute), obs)
		handedOff(t, r, r, refused, fresh("handoff"), nil)
	})
}

// clusterInterop: the go-redis and rueidis adapters share the cluster's
// locks, and a release through one wakes a waiter of the other (SPUBLISH
// heard over SSUBSCRIBE).
func clusterInterop(t *testing.T, seeds []string) {
	g := goredisNode(t, redistest.ClusterClient(t, seeds...))
	r := clusterNode(t, seeds)
	opts := []redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject())}
	interop(t, newSingle(t, g, opts...), newSingle(t, r, opts...))
	obsG, refusedG := contention()
	obsR, refusedR := contention()
	gl, rl := newSingle(t, g, redlock.WithTTL(time.Minute), obsG), newSingle(t, r, redlock.WithTTL(time.Minute), obsR)
	t.Run("go-redis wakes rueidis", func(t *testing.T) { handedOff(t, gl, rl, refusedR, fresh("interop:handoff"), nil) })
	t.Run("rueidis wakes go-redis", func(t *testing.T) { handedOff(t, rl, gl, refusedG, fresh("interop:handoff"), nil) })
}

// total counts command over the cluster's masters (replicas run what
// they replicate too).
func total(t *testing.T, cc *redis.ClusterClient, command string) int {
	var n atomic.Int64
	require.NoError(t, cc.ForEachMaster(t.Context(), func(_ context.Context, c *redis.Client) error {
		n.Add(int64(redistest.Calls(t, c, command)))
		return nil
	}))
	return int(n.Load())
}

// clusterNeverResends: on a cluster too, a script whose reply is lost
// after it ran is an error, and it ran once on the whole cluster: rueidis
// resends after a broken connection only commands marked retryable, and
// follows MOVED and ASK only for commands the node refused.
func clusterNeverResends(t *testing.T, seeds []string) {
	loser := &replyLoser{only: "EVALSHA"}
	n := clusterNodeWith(t, clientOption(seeds, quiet, loser.option))
	cc := redistest.ClusterClient(t, seeds...)
	key := "{" + fresh("lost") + "}"
	_, err := n.Eval(t.Context(), counting, []string{key + ":warm"}) // the slot's connection is up, the script known
	require.NoError(t, err)
	evalsha := total(t, cc, "evalsha")
	loser.left.Store(1)
	_, err = n.Eval(t.Context(), counting, []string{key})
	require.Error(t, err, "the reply was lost: the outcome is unknown")
	assert.Equal(t, evalsha+1, total(t, cc, "evalsha"), "EVALSHA ran once on the cluster")
	assert.Equal(t, "1", cc.Get(t.Context(), key).Val(), "the script ran once")
}

// replicaOf returns the replica of the master at addr, as the master
// lists it.
func replicaOf(t *testing.T, cc *redis.ClusterClient, addr string) string {
	var replica string
	testwait.Until(t, "the master lists its replica", func() bool {
		slots, err := cc.ClusterSlots(t.Context()).Result()
		require.NoError(t, err)
		for _, s := range slots {
			if s.Nodes[0].Addr == addr && len(s.Nodes) > 1 {
				replica = s.Nodes[1].Addr
			}
		}
		return replica != ""
	})
	return replica
}

// clusterReplicaAck: WithReplicaAck on a cluster node sends the script
// and its WAIT to the master of the keys' slot, on one connection. With
// the slot's replica healthy the script succeeds and the replica has its
// write the moment the call returns; with the replica frozen (SIGSTOP)
// the call fails with ErrReplicaAck after the WAIT timeout, though the
// script ran, and a locker's acquisition there fails and is rolled back.
func clusterReplicaAck(t *testing.T, cl *redisserver.Cluster, seeds []string) {
	n := clusterNode(t, seeds, WithReplicaAck(1, 300*time.Millisecond))
	assert.True(t, n.Info().ReplicaAck)
	cc := redistest.ClusterClient(t, seeds...)
	key := "{" + fresh("ack") + "}"
	master, err := cc.MasterForKey(t.Context(), key)
	require.NoError(t, err)
	replica := replicaOf(t, cc, master.Options().Addr)
	_, err = n.Eval(t.Context(), counting, []string{key + ":warm"}) // the master knows the script: no NOSCRIPT, EVAL and second WAIT
	require.NoError(t, err)
	waits, all := redistest.Calls(t, master, "wait"), total(t, cc, "wait")

	got, err := n.Eval(t.Context(), counting, []string{key})
	require.NoError(t, err)
	assert.Equal(t, int64(1), got)
	assert.Equal(t, waits+1, redistest.Calls(t, master, "wait"), "WAIT on the key's master")
	assert.Equal(t, all+1, total(t, cc, "wait"), "and nowhere else")
	ro := readOnly(t, replica)
	assert.Equal(t, "1", ro.Get(t.Context(), key).Val(), "the replica has the write as the call returns")

	require.NoError(t, cl.ServerAt(replica).Pause())
	defer func() { require.NoError(t, cl.ServerAt(replica).Resume()) }()
	got, err = n.Eval(t.Context(), counting, []string{key})
	require.ErrorIs(t, err, ErrReplicaAck)
	assert.Nil(t, got)
	assert.Equal(t, "2", master.Get(t.Context(), key).Val(), "the script ran, once")

	s := newSingle(t, n, redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(2*time.Second))
	lockKey := key + ":lock" // same slot
	_, err = s.Lock(t.Context(), lockKey)
	require.Error(t, err, "no replica acknowledged the grant")
	assert.Zero(t, master.Exists(t.Context(), lockKey).Val(), "and it was rolled back")
}

// readOnly returns a client of one cluster node that reads keys even on a
// replica (READONLY on every connection).
func readOnly(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ReadOnly(ctx).Err()
		}})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterSlotMoved: a waiter's hub follows its slot to another master.
// The slot (no key in it) is reassigned by hand (CLUSTER SETSLOT NODE on
// every master); the old owner drops the slot's sharded subscriptions,
// and the hub subscribes on the new owner, telling the waiter that a
// message may have been missed, and then hears messages there.
func clusterSlotMoved(t *testing.T, seeds []string) {
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	n := clusterNode(t, seeds)
	channel := "moved:{" + fresh("t") + "}"
	acked := clusterNode(t, seeds, WithReplicaAck(1, time.Second))
	_, err := acked.Eval(ctx, counting, []string{channel + ":warm"}) // its slot map has the old owner
	require.NoError(t, err)
	heard := make(chan string, 16)
	stop, err := n.Subscribe(ctx, func(p string) {
		select {
		case heard <- p:
		default:
		}
	}, channel)
	require.NoError(t, err)
	defer stop()

	cc := redistest.ClusterClient(t, seeds...)
	require.NoError(t, cc.Del(ctx, channel+":warm").Err()) // a slot that holds keys cannot be reassigned
	src, err := cc.MasterForKey(ctx, channel)
	require.NoError(t, err)
	var mu sync.Mutex
	var masters []string
	require.NoError(t, cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, c.Options().Addr)
		return nil
	}))
	var dst *redis.Client
	for _, addr := range masters {
		if addr != src.Options().Addr {
			dst = direct(t, addr)
		}
	}
	shardSubs := func(c *redis.Client) int64 { return c.PubSubShardNumSub(ctx, channel).Val()[channel] }
	require.Equal(t, int64(1), shardSubs(src), "subscribed on the slot's owner")

	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	for _, addr := range masters {
		require.NoError(t, direct(t, addr).Do(ctx, "CLUSTER", "SETSLOT", hashslot.Of(channel), "NODE", dstID).Err())
	}
	select {
	case p := <-heard:
		assert.Empty(t, p, "a message may have been missed: payload \"\"")
	case <-ctx.Done():
		t.Fatal("the waiter was not told that its subscription moved")
	}
	assert.Equal(t, int64(1), shardSubs(dst), "subscribed on the new owner")
	assert.Zero(t, shardSubs(src), "and no more on the old one")

	// With WithReplicaAck the script and its WAIT go to the old owner,
	// which answers MOVED: the call fails, and is not resent to the new
	// owner (its WAIT would count another connection's writes).
	key := channel + ":acked"
	_, err = acked.Eval(ctx, counting, []string{key})
	require.ErrorContains(t, err, "MOVED")
	assert.Zero(t, dst.Exists(ctx, key).Val(), "not resent to the new owner")
	testwait.Until(t, "the next call reaches the new owner", func() bool {
		got, err := acked.Eval(ctx, counting, []string{key})
		if err == nil {
			assert.Equal(t, int64(1), got, "the first call ran nowhere")
		}
		return err == nil
	})
	require.NoError(t, dst.SPublish(ctx, channel, "there").Err())
	for {
		select {
		case p := <-heard:
			if p == "there" {
				return // heard on the new owner
			}
		case <-ctx.Done():
			t.Fatal("the message on the new owner was not heard")
		}
	}
}
