package rueidisnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/backendtest"
	"github.com/quorumlock/redlock/goredis"
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

// fresh returns a key of its own for a test, without a hash tag.
func fresh(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + ":" + hex.EncodeToString(b[:])
}

// TestCluster runs the rueidis adapter over one Redis Cluster of three
// masters with a replica each, shared by its subtests (each uses keys of
// its own): starting a cluster costs seconds.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	seeds := cl.Addrs()[:3]
	t.Run("Name", func(t *testing.T) { clusterName(t, seeds) })
	t.Run("Keys", func(t *testing.T) { clusterKeyMapping(t, seeds) })
	t.Run("Conformance", func(t *testing.T) { clusterConformance(t, cl) })
	t.Run("RedlockContention", func(t *testing.T) { clusterRedlockContention(t, seeds) })
	t.Run("Handoff", func(t *testing.T) { clusterHandoff(t, cl, seeds) })
	t.Run("InteropWithGoRedis", func(t *testing.T) { clusterInterop(t, seeds) })
	t.Run("ReadWrite", func(t *testing.T) { clusterReadWrite(t, seeds) })
	t.Run("SetsAndPeekMapped", func(t *testing.T) { clusterSetsAndPeek(t, seeds) })
	t.Run("LostReplies", func(t *testing.T) { clusterLostReplies(t, seeds) })
	t.Run("SlotMoved", func(t *testing.T) { clusterSlotMoved(t, seeds) }) // last: it reassigns a slot
}

// clusterNodeOf is the rueidis node of a fresh cluster client seeded with
// seeds, as its concrete type.
func clusterNodeOf(t *testing.T, seeds []string, change ...func(*rueidis.ClientOption)) *clusterNode {
	t.Helper()
	b := described(t, clientOption(seeds, change...))
	g, ok := b.(*clusterNode)
	require.True(t, ok, "a cluster client makes a cluster node, got %T", b)
	return g
}

// goredisClusterNode is the go-redis adapter's node of the cluster.
func goredisClusterNode(t *testing.T, seeds ...string) redlock.Backend {
	t.Helper()
	b, err := goredis.New(redistest.ClusterClient(t, seeds...))
	require.NoError(t, err)
	return b
}

// clusterName: the rueidis node of a cluster has goredis's name for a
// client with the same seeds, in any order, so a Redlock refuses the two
// as one node counted twice; without WithClientOption a cluster client
// is refused.
func clusterName(t *testing.T, seeds []string) {
	r := clusterNodeOf(t, []string{seeds[2], seeds[0], seeds[1], seeds[0]})
	g := goredisClusterNode(t, seeds...)
	assert.Equal(t, "cluster"+sortedList(seeds, "[", "]"), r.Name())
	assert.Equal(t, g.Name(), r.Name(), "one cluster, one name, whichever the adapter")
	standalone := adapt(t, client(t, redistest.Start(t, 1).Addrs()[0]))
	_, err := redlock.New([]redlock.Backend{r, g, standalone})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two clients of one cluster are one node")

	_, err = New(newClient(t, clientOption(seeds)))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a cluster client without WithClientOption")
	for name, change := range map[string]func(*rueidis.ClientOption){
		"ConnLifetime":   func(o *rueidis.ClientOption) { o.ConnLifetime = time.Hour },
		"SendToReplicas": func(o *rueidis.ClientOption) { o.SendToReplicas = func(rueidis.Completed) bool { return false } },
		"sentinel":       func(o *rueidis.ClientOption) { o.Sentinel.MasterSet = "mymaster" },
		"no address":     func(o *rueidis.ClientOption) { o.InitAddress = nil },
	} {
		opt := clientOption(seeds)
		change(&opt)
		_, err := New(newClient(t, clientOption(seeds)), WithClientOption(opt))
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
}

// clusterKeyMapping: a key without a hash tag is locked in braces, its fence
// counter and announcement in its slot; keys whose names cannot share a
// slot are refused at once, by CheckKey and by every call.
func clusterKeyMapping(t *testing.T, seeds []string) {
	g := clusterNodeOf(t, seeds)
	cc := redistest.ClusterClient(t, seeds...)
	key := fresh("wire")
	ok, fence, err := g.AcquireFenced(t.Context(), key, "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, int64(1), fence)
	assert.Equal(t, "tok", cc.Get(t.Context(), "{"+key+"}").Val(), "the key in braces")
	assert.Equal(t, "1", cc.Get(t.Context(), "{"+key+"}:fence").Val(), "its fence counter in its slot")
	assert.Zero(t, cc.Exists(t.Context(), key).Val(), "not the bare key")
	ok, err = g.Release(t.Context(), "{"+key+"}", "tok", true)
	require.NoError(t, err)
	assert.True(t, ok, `"k" and "{k}" are one lock on a cluster`)

	for _, bad := range []string{"order:{}", "}x", ""} {
		assert.ErrorIs(t, g.CheckKey(bad), redlock.ErrInvalid, "%q", bad)
		_, err := g.Acquire(t.Context(), bad, "tok", time.Minute)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "%q", bad)
		_, err = g.Notify(t.Context(), bad, func(string) {})
		assert.ErrorIs(t, err, redlock.ErrInvalid, "%q", bad)
	}
	s, err := redlock.NewSingle(g)
	require.NoError(t, err)
	_, err = s.Lock(t.Context(), "order:{}")
	assert.ErrorIs(t, err, redlock.ErrInvalid, "the locker asks CheckKey")
}

// clusterConformance runs the suite over the cluster as one node. Stall
// pauses every server of the cluster (SIGSTOP) for far less than the
// cluster's node timeout, so no replica takes over.
func clusterConformance(t *testing.T, cl *redisserver.Cluster) {
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		return backendtest.Target{
			Backend: clusterNodeOf(t, cl.Addrs()[:1]),
			Stall: func() func() {
				for _, s := range cl.Servers {
					if err := s.Pause(); err != nil {
						t.Fatal(err)
					}
				}
				return func() {
					for _, s := range cl.Servers {
						if err := s.Resume(); err != nil {
							t.Error(err)
						}
					}
				}
			},
		}
	})
}

// mixedNodes is a Redlock's nodes: the cluster through rueidis and two
// standalone masters.
func mixedNodes(t *testing.T, seeds []string) []redlock.Backend {
	masters := redistest.Start(t, 2).Addrs()
	return []redlock.Backend{clusterNodeOf(t, seeds), adapt(t, client(t, masters[0])), adapt(t, client(t, masters[1]))}
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

// contention counts a locker's refused attempts.
func contention() (redlock.Option, *atomic.Int64) {
	var refused atomic.Int64
	return redlock.WithObserver(redlock.ObserverFunc(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			refused.Add(1)
		}
	})), &refused
}

// handedOff checks that a waiter on key whose next attempt is an hour
// away gets the lock once holder releases it: only a release announcement
// can wake it before the watchdog. subscribed, when set, is checked while
// the waiter waits.
func handedOff(t *testing.T, holderLk, waiterLk redlock.Locker, refused *atomic.Int64, key string, subscribed func()) {
	t.Helper()
	holder, err := holderLk.Lock(t.Context(), key)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := waiterLk.Lock(ctx, key, redlock.WithStrategy(redlock.Retry(1, time.Hour)))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	// The first attempt, and the one made once subscribed.
	testwait.Until(t, "two refused attempts", func() bool { return refused.Load() >= 2 })
	if subscribed != nil {
		subscribed()
	}
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-got, "the waiter was woken by the release, not by its hour-long delay")
}

// clusterHandoff: waiters are woken by releases heard over SSUBSCRIBE, on
// the cluster alone (where nothing else can wake them) and in a Redlock
// of the cluster and two standalone masters. While one waits, the
// cluster has a sharded subscriber of the key's channel and no plain one.
func clusterHandoff(t *testing.T, cl *redisserver.Cluster, seeds []string) {
	t.Run("single", func(t *testing.T) {
		obs, refused := contention()
		s, err := redlock.NewSingle(clusterNodeOf(t, seeds), redlock.WithTTL(time.Minute), obs)
		require.NoError(t, err)
		key := fresh("handoff")
		channel := redlock.ReleaseChannel("{" + key + "}")
		handedOff(t, s, s, refused, key, func() {
			var sharded, plain int64
			for _, addr := range cl.Addrs() {
				c := redistest.Client(t, addr)
				sharded += c.PubSubShardNumSub(t.Context(), channel).Val()[channel]
				plain += c.PubSubNumSub(t.Context(), channel).Val()[channel]
			}
			assert.Equal(t, int64(1), sharded, "one SSUBSCRIBE of the key's channel, on its master")
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
// locks: a key locked through one is held for the other, its fence
// counter is one, and a release through one wakes a waiter of the other
// (SPUBLISH heard over SSUBSCRIBE).
func clusterInterop(t *testing.T, seeds []string) {
	single := func(b redlock.Backend, opts ...redlock.Option) *redlock.Single {
		s, err := redlock.NewSingle(b, append([]redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing()}, opts...)...)
		require.NoError(t, err)
		return s
	}
	pairs := []struct {
		name        string
		first, then redlock.Backend
	}{{"go-redis then rueidis", goredisClusterNode(t, seeds...), clusterNodeOf(t, seeds)},
		{"rueidis then go-redis", clusterNodeOf(t, seeds), goredisClusterNode(t, seeds...)}}
	for _, tc := range pairs {
		t.Run(tc.name, func(t *testing.T) {
			first, then := single(tc.first, redlock.WithStrategy(redlock.Reject())), single(tc.then, redlock.WithStrategy(redlock.Reject()))
			for _, key := range []string{fresh("interop"), "interop:{" + fresh("t") + "}"} {
				l, err := first.Lock(t.Context(), key)
				require.NoError(t, err)
				_, err = then.Lock(t.Context(), key)
				require.ErrorIs(t, err, redlock.ErrNotAcquired, "the lock is held for the other adapter")
				require.NoError(t, l.Unlock(t.Context()))
				next, err := then.Lock(t.Context(), key)
				require.NoError(t, err, "released through one adapter, free for the other")
				assert.Equal(t, l.Fence()+1, next.Fence(), "one fence counter per key, whichever the adapter")
				require.NoError(t, next.Unlock(t.Context()))
			}
		})
	}
	for _, tc := range pairs {
		t.Run("hand-off "+tc.name, func(t *testing.T) {
			obs, refused := contention()
			handedOff(t, single(tc.first), single(tc.then, obs), refused, fresh("interop:handoff"), nil)
		})
	}
}

// clusterLostReplies: on a cluster too, a command whose reply is lost
// after it ran is an error, and it ran once on the whole cluster: rueidis
// resends after a broken connection only commands marked retryable, and
// follows MOVED and ASK only for commands the node refused.
func clusterLostReplies(t *testing.T, seeds []string) {
	d := &replyLoser{}
	g := clusterNodeOf(t, seeds, quiet, func(o *rueidis.ClientOption) { o.DialCtxFn = d.dial })
	cc := redistest.ClusterClient(t, seeds...)
	total := func(command string) int { // over the masters: replicas run what they replicate too
		var n atomic.Int64
		require.NoError(t, cc.ForEachMaster(t.Context(), func(_ context.Context, c *redis.Client) error {
			n.Add(int64(redistest.Calls(t, c, command)))
			return nil
		}))
		return int(n.Load())
	}
	key := fresh("lost")
	warmSlot := func() { // the slot's connection is up: the next reply read is the command's
		require.NoError(t, g.c.Do(t.Context(), g.c.B().Get().Key("{"+key+"}").Build()).NonRedisError())
	}

	warmSlot()
	sets := total("set")
	d.left.Store(1)
	_, err := g.Acquire(t.Context(), key, "tok", time.Minute)
	require.Error(t, err, "the reply was lost: the outcome is unknown")
	assert.Equal(t, sets+1, total("set"), "SET ran once on the cluster: never resent")

	_, err = g.Release(t.Context(), "{"+key+"}:other", "tok", false) // the key's master knows the script now
	require.NoError(t, err)
	warmSlot()
	evalsha := total("evalsha")
	d.left.Store(1)
	_, err = g.Release(t.Context(), key, "tok", true)
	require.Error(t, err, "the reply was lost: the outcome is unknown")
	assert.Equal(t, evalsha+1, total("evalsha"), "the release ran once: never resent")
	assert.Zero(t, cc.Exists(t.Context(), "{"+key+"}").Val(), "the release ran")
}

// clusterSlotMoved: a waiter's hub follows its slot to another master.
// The slot (no key in it) is reassigned by hand (CLUSTER SETSLOT NODE on
// every master); the old owner drops the slot's sharded subscriptions,
// and the hub subscribes on the new owner, telling the waiter that a
// release may have been missed, and then hears releases there.
func clusterSlotMoved(t *testing.T, seeds []string) {
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	g := clusterNodeOf(t, seeds)
	key := "moved:{" + fresh("t") + "}"
	heard := make(chan string, 16)
	stop, err := g.Notify(ctx, key, func(p string) {
		select {
		case heard <- p:
		default:
		}
	})
	require.NoError(t, err)
	defer stop()

	cc := redistest.ClusterClient(t, seeds...)
	src, err := cc.MasterForKey(ctx, key)
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
			dst = redistest.Client(t, addr)
		}
	}
	channel := redlock.ReleaseChannel(key)
	shardSubs := func(c *redis.Client) int64 { return c.PubSubShardNumSub(ctx, channel).Val()[channel] }
	require.Equal(t, int64(1), shardSubs(src), "subscribed on the slot's owner")

	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	for _, addr := range masters {
		require.NoError(t, redistest.Client(t, addr).Do(ctx, "CLUSTER", "SETSLOT", hashslot.Of(key), "NODE", dstID).Err())
	}
	select {
	case p := <-heard:
		assert.Empty(t, p, "a release may have been missed: payload \"\"")
	case <-ctx.Done():
		t.Fatal("the waiter was not told that its subscription moved")
	}
	assert.Equal(t, int64(1), shardSubs(dst), "subscribed on the new owner")
	assert.Zero(t, shardSubs(src), "and no more on the old one")

	ok, err := g.Acquire(ctx, key, "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = g.Release(ctx, key, "tok", true)
	require.NoError(t, err)
	require.True(t, ok)
	for {
		select {
		case p := <-heard:
			if p == "tok" {
				return // the release on the new owner was heard
			}
		case <-ctx.Done():
			t.Fatal("the release on the new owner was not heard")
		}
	}
}
