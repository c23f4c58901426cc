package goredis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterSlotMatchesRedis: the hash slots by which the node keeps one
// sharded subscription per slot (internal/hashslot) agree with CLUSTER
// KEYSLOT.
func TestClusterSlotMatchesRedis(t *testing.T) {
	_, cc := clusterNode(t)
	keys := []string{"", "a", "order:42", "{order:42}", "order:{42}:fence", "a{}b", "{}{x}", "x{y}z", "123456789", "über"}
	for i := range 200 {
		keys = append(keys, fresh(strconv.Itoa(i)))
	}
	for _, k := range keys {
		want, err := cc.ClusterKeySlot(t.Context(), k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, int64(hashslot.Of(k)), "%q", k)
	}
}

// TestClusterNodeName: one name per cluster, whatever the seeds' order
// or repetitions, so a Redlock refuses two clients of one cluster.
func TestClusterNodeName(t *testing.T) {
	client := func(addrs ...string) *Node { return adapt(t, redistest.ClusterClient(t, addrs...)) }
	a := client("127.0.0.1:7001", "127.0.0.1:7000", "127.0.0.1:7002")
	b := client("127.0.0.1:7002", "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000")
	assert.Equal(t, driver.Info{Name: "cluster[127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002]", Cluster: true}, a.Info())
	assert.Equal(t, a.Info(), b.Info())
	s := adapt(t, redistest.Client(t, "127.0.0.1:7100"))
	_, err := redlock.New([]driver.Node{a, b, s})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two clients of one cluster are one node")
}

// TestClusterKeysOnTheWire: what a lock leaves on the cluster through the
// node, for a key with a tag and one without (wrapped in braces), and
// that its release is SPUBLISHed on the channel of the key as the
// cluster sees it.
func TestClusterKeysOnTheWire(t *testing.T) {
	g, cc := clusterNode(t)
	s := newSingle(t, g, redlock.WithFencing(), redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	ctx := t.Context()
	untagged := fresh("wire")
	tagged := "wire:{" + fresh("t") + "}"
	for key, wire := range map[string]string{untagged: "{" + untagged + "}", tagged: tagged} {
		ps := cc.SSubscribe(ctx, releaseChannel(wire))
		_, err := ps.Receive(ctx) // the ssubscribe confirmation: active
		require.NoError(t, err)

		l, err := s.Lock(ctx, key)
		require.NoError(t, err)
		assert.Positive(t, l.Fence())
		assert.Equal(t, l.Token(), cc.Get(ctx, wire).Val(), "the lock key of %q on the cluster", key)
		assert.Equal(t, strconv.FormatInt(l.Fence(), 10), cc.Get(ctx, wire+fenceSuffix).Val(), "the fence counter of %q", key)
		if key == untagged {
			assert.Zero(t, cc.Exists(ctx, key).Val(), "not the bare key")
		}
		require.NoError(t, l.Extend(ctx, 2*time.Minute))
		assert.Greater(t, cc.PTTL(ctx, wire).Val(), time.Minute)

		require.NoError(t, l.Unlock(ctx))
		assert.Zero(t, cc.Exists(ctx, wire).Val())
		msg, err := ps.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, releaseChannel(wire), msg.Channel)
		assert.Equal(t, l.Token(), msg.Payload)
		require.NoError(t, ps.Close())
	}
}

// TestClusterRefusesKeys: a key whose names would land in different
// slots is refused before anything is sent, with ErrInvalid, by a Single
// over the node and by a Redlock of it and two standalone masters (which
// could grant it alone); Subscribe refuses channels of different slots,
// and no channel at all.
func TestClusterRefusesKeys(t *testing.T) {
	g, _ := clusterNode(t)
	ctx := t.Context()
	s := newSingle(t, g, redlock.WithStrategy(redlock.Reject()))
	r := newRedlock(t, []driver.Node{g, standalone(t), standalone(t)}, redlock.WithStrategy(redlock.Reject()))
	for _, key := range []string{"order:{}", "}order"} {
		_, err := s.Lock(ctx, key)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Lock %q", key)
		var qe *redlock.QuorumError
		assert.False(t, errors.As(err, &qe), "refused before any round")
		_, err = s.Lock(ctx, key, redlock.WithFencing())
		assert.ErrorIs(t, err, redlock.ErrInvalid, "a fenced Lock %q", key)
		_, err = s.RLock(ctx, key)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "RLock %q", key)
		assert.ErrorIs(t, r.Do(ctx, key, func(context.Context) error { return nil }), redlock.ErrInvalid, "Do %q", key)
		_, err = r.Lock(ctx, key)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "a Redlock's Lock %q", key)
	}
	_, err := s.LockMany(ctx, []string{fresh("x"), fresh("y")})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a set across slots")

	stop, err := g.Subscribe(ctx, func(string) {}, releaseChannel("{a}"), releaseChannel("{b}"))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "channels of two slots")
	assert.Nil(t, stop)
	_, err = g.Subscribe(ctx, func(string) {})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "no channel")
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Empty(t, g.hubs, "no subscription for a refused key")
}

// TestClusterReleaseDoesNotBroadcast: an announced release is one SPUBLISH
// on the master that owns the key, reaching its sharded subscribers, and
// no PUBLISH, which a cluster would forward to every node: a plain
// SUBSCRIBE on every server of the cluster hears nothing (and does hear a
// PUBLISH, the control). Only the owner has the node's SSUBSCRIBE.
func TestClusterReleaseDoesNotBroadcast(t *testing.T) {
	cl := redisCluster(t)
	g, cc := clusterNode(t)
	ctx := t.Context()
	key := fresh("broadcast")
	wire, channel := "{"+key+"}", releaseChannel("{"+key+"}")
	owner, err := cc.MasterForKey(ctx, wire)
	require.NoError(t, err)

	cb, got := testwait.Payloads()
	stop, err := g.Subscribe(ctx, cb, channel)
	require.NoError(t, err)
	defer stop()

	servers := map[string]*redis.Client{}
	plain := map[string]*redis.PubSub{}
	for _, addr := range cl.Addrs() {
		c := redistest.Client(t, addr)
		servers[addr] = c
		ps := c.Subscribe(ctx, channel)
		_, err := ps.Receive(ctx) // the subscribe confirmation: active
		require.NoError(t, err)
		plain[addr] = ps
		t.Cleanup(func() { ps.Close() })
	}
	masters := 0
	publishes, spublishes := map[string]int{}, map[string]int{}
	for addr, c := range servers {
		if c.Do(ctx, "role").Val().([]any)[0] != "master" {
			continue
		}
		masters++
		publishes[addr], spublishes[addr] = redistest.Calls(t, c, "publish"), redistest.Calls(t, c, "spublish")
		n, err := c.PubSubShardNumSub(ctx, channel).Result()
		require.NoError(t, err)
		want := int64(0)
		if addr == owner.Options().Addr {
			want = 1
		}
		assert.Equal(t, want, n[channel], "sharded subscribers of %s on %s", channel, addr)
	}
	require.Equal(t, 3, masters)

	s := newSingle(t, g, redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	l, err := s.Lock(ctx, key)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, l.Token(), testwait.Next(t, got), "the sharded subscriber hears the release")

	for addr := range publishes {
		assert.Equal(t, publishes[addr], redistest.Calls(t, servers[addr], "publish"), "PUBLISH calls on %s", addr)
		want := spublishes[addr]
		if addr == owner.Options().Addr {
			want++
		}
		assert.Equal(t, want, redistest.Calls(t, servers[addr], "spublish"), "SPUBLISH calls on %s", addr)
	}
	for addr, ps := range plain {
		msg, err := ps.ReceiveTimeout(ctx, quiet)
		assert.Error(t, err, "%s: a plain subscriber got %v", addr, msg)
	}
	// Control: a PUBLISH does reach the plain subscribers of every node.
	require.NoError(t, cc.Publish(ctx, channel, "control").Err())
	for addr, ps := range plain {
		msg, err := ps.ReceiveMessage(ctx)
		if assert.NoError(t, err, addr) {
			assert.Equal(t, "control", msg.Payload, addr)
		}
	}
}

// slotHub returns the node's hub of channel's slot, as Subscribe would.
func slotHub(t *testing.T, g *Node, channel string) *hub {
	t.Helper()
	h, err := g.hubFor([]string{channel})
	require.NoError(t, err)
	return h
}

// gatedPings holds the hub's PINGs until released, to show that Subscribe
// waits for the PING written after SSUBSCRIBE, not for the subscription's
// confirmation.
type gatedPings struct {
	pubSub
	gate <-chan struct{}
}

func (p gatedPings) Ping(ctx context.Context, payload ...string) error {
	select {
	case <-p.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.pubSub.Ping(ctx, payload...)
}

// TestClusterActivationWaitsForPong: with the PING held back, the
// SSUBSCRIBE is written and confirmed by the node, yet Subscribe does not
// return; once the PING is written and answered it does, and a release
// made right then reaches the waiter.
func TestClusterActivationWaitsForPong(t *testing.T) {
	g, cc := clusterNode(t)
	key := fresh("activation")
	wire := "{" + key + "}"
	channel := releaseChannel(wire)
	gate := make(chan struct{})
	slotHub(t, g, channel).wrap = func(ps pubSub) pubSub { return gatedPings{ps, gate} }

	cb, got := testwait.Payloads()
	type result struct {
		stop func()
		err  error
	}
	done := make(chan result, 1)
	go func() {
		stop, err := g.Subscribe(t.Context(), cb, channel)
		done <- result{stop, err}
	}()
	owner, err := cc.MasterForKey(t.Context(), wire)
	require.NoError(t, err)
	testwait.Until(t, "the SSUBSCRIBE reached the owner", func() bool {
		return owner.PubSubShardNumSub(t.Context(), channel).Val()[channel] == 1
	})
	select {
	case r := <-done:
		if r.stop != nil {
			r.stop()
		}
		t.Fatalf("Subscribe returned (%v) before its PING was answered", r.err)
	case <-time.After(quiet):
	}
	close(gate)
	r := testwait.Next(t, done)
	require.NoError(t, r.err)
	defer r.stop()
	s := newSingle(t, g, redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	l, err := s.Lock(t.Context(), key)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.Equal(t, l.Token(), testwait.Next(t, got))
}

// TestClusterActivationRace: on keys all over the cluster, a release made
// as soon as Subscribe returns is heard, every time; keys of one slot
// share a hub, and each slot has its own.
func TestClusterActivationRace(t *testing.T) {
	g, _ := clusterNode(t)
	s := newSingle(t, g, redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	tag := fresh("shared")
	var wg sync.WaitGroup
	slots := map[uint16]bool{}
	for i := range 40 {
		key := fresh("race")
		if i%4 == 0 {
			key = "race:{" + tag + "}:" + strconv.Itoa(i) // ten keys of one slot
		}
		wire, err := hashslot.Key(key)
		require.NoError(t, err)
		slots[hashslot.Of(wire)] = true
		wg.Go(func() {
			cb, got := testwait.Payloads()
			stop, err := g.Subscribe(t.Context(), cb, releaseChannel(wire))
			if !assert.NoError(t, err) {
				return
			}
			defer stop()
			l, err := s.Lock(t.Context(), key)
			if !assert.NoError(t, err) {
				return
			}
			assert.NoError(t, l.Unlock(t.Context()))
			select {
			case p := <-got:
				assert.Equal(t, l.Token(), p)
			case <-time.After(watchdog):
				t.Errorf("%s: the release right after Subscribe returned was missed", key)
			}
		})
	}
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Len(t, g.hubs, len(slots), "one hub per slot")
	assert.LessOrEqual(t, len(slots), 31, "30 keys of their own and ten of one slot")
}

// movedPubSub subscribes to channel foreign instead of the first channel
// it is asked for after armed is closed: a channel of a slot the
// connection's master does not own, which it refuses with MOVED.
type movedPubSub struct {
	pubSub
	armed   <-chan struct{}
	foreign string
	used    *atomic.Bool
}

func (p movedPubSub) Subscribe(ctx context.Context, channels ...string) error {
	select {
	case <-p.armed:
		if p.used.CompareAndSwap(false, true) {
			channels = []string{p.foreign}
		}
	default:
	}
	return p.pubSub.Subscribe(ctx, channels...)
}

// TestClusterRefusedSubscription: an SSUBSCRIBE the node refuses (MOVED:
// the slot is not the connection's master's, as after a migration) fails
// Subscribe instead of being confirmed by the PING that follows it; the
// hub reopens its connection (reopen), its other waiter stays subscribed,
// and a new Subscribe to the same channel subscribes again.
func TestClusterRefusedSubscription(t *testing.T) {
	g, cc := clusterNode(t)
	ctx := t.Context()
	tag := fresh("moved")
	first, second := "moved:{"+tag+"}:1", "moved:{"+tag+"}:2"
	owner, err := cc.MasterForKey(ctx, first)
	require.NoError(t, err)
	var foreign string
	for i := 0; foreign == ""; i++ {
		ch := releaseChannel("{" + fresh(strconv.Itoa(i)) + "}")
		m, err := cc.MasterForKey(ctx, ch)
		require.NoError(t, err)
		if m.Options().Addr != owner.Options().Addr {
			foreign = ch
		}
	}
	armed := make(chan struct{})
	used := new(atomic.Bool) // once, also over the connection the hub reopens after MOVED
	slotHub(t, g, releaseChannel(first)).wrap = func(ps pubSub) pubSub { return movedPubSub{ps, armed, foreign, used} }

	cb1, got1 := testwait.Payloads()
	stop1, err := g.Subscribe(ctx, cb1, releaseChannel(first))
	require.NoError(t, err)
	defer stop1()
	close(armed)
	_, err = g.Subscribe(ctx, func(string) {}, releaseChannel(second))
	require.Error(t, err, "Subscribe must fail when the node refused its SSUBSCRIBE")
	assert.Contains(t, err.Error(), "MOVED")

	cb2, got2 := testwait.Payloads()
	stop2, err := g.Subscribe(ctx, cb2, releaseChannel(second)) // subscribes again, for real
	require.NoError(t, err)
	defer stop2()
	s := newSingle(t, g, redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()))
	for i, key := range []string{first, second} {
		l, err := s.Lock(ctx, key)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		got := []chan string{got1, got2}[i]
		for p := testwait.Next(t, got); p != l.Token(); p = testwait.Next(t, got) {
			assert.Empty(t, p, "only a resynchronisation's call may come first")
		}
	}
}

// silent hides a node's Subscriber: its releases wake nobody.
type silent struct{ driver.Node }

// mixed returns a cluster node of the shared cluster, and a Redlock's
// nodes: that node and two standalone masters.
func mixed(t *testing.T) (*Node, []driver.Node) {
	g, _ := clusterNode(t)
	return g, append([]driver.Node{g}, serverNodes(t, 2)...)
}

// TestClusterInRedlockContention: goroutines increment a counter
// non-atomically under a fenced lock of a Redlock of one cluster and two
// standalone masters, on a key with a hash tag and one without: no
// update is lost, no two holders overlap, and fencing tokens go up
// strictly from holder to holder.
func TestClusterInRedlockContention(t *testing.T) {
	_, nodes := mixed(t)
	r := newRedlock(t, nodes, redlock.WithTTL(5*time.Second), redlock.WithFencing(),
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

// TestClusterHandoff: a waiter whose next attempt is an hour away is
// woken by the release, heard over SSUBSCRIBE: over the cluster alone,
// over a Redlock of the cluster and two masters, and over that Redlock
// with the masters silent, so that only the cluster's announcement can
// wake it.
func TestClusterHandoff(t *testing.T) {
	g, nodes := mixed(t)
	for name, ns := range map[string][]driver.Node{
		"single":        {g},
		"redlock":       nodes,
		"redlock-quiet": {nodes[0], silent{nodes[1]}, silent{nodes[2]}},
	} {
		t.Run(name, func(t *testing.T) {
			var refused atomic.Int64
			lk := newRedlock(t, ns, redlock.WithTTL(time.Minute), redlock.WithObserver(func(e redlock.Event) {
				if e.Kind == redlock.EventContention {
					refused.Add(1)
				}
			}))
			key := fresh("handoff")
			held, err := lk.Lock(t.Context(), key)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), watchdog)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				l, err := lk.Lock(ctx, key, redlock.WithStrategy(redlock.Retry(2, time.Hour)))
				if err == nil {
					err = l.Unlock(context.Background())
				}
				done <- err
			}()
			// The first attempt, and the one made once subscribed.
			testwait.Until(t, "two refused attempts", func() bool { return refused.Load() >= 2 })
			require.NoError(t, held.Unlock(t.Context()))
			require.NoError(t, testwait.Next(t, done), "the waiter was woken by the release, not by its hour-long delay")
		})
	}
}

// TestClusterErrorReply: on a cluster an error reply is an error carrying
// the node's text, the node works on after it, and a script given keys of
// two slots is refused by the cluster (CROSSSLOT), not split.
func TestClusterErrorReply(t *testing.T) {
	g, _ := clusterNode(t)
	key := "{" + fresh("err") + "}"
	_, err := g.Eval(t.Context(), driver.NewScript("fail", `return redis.error_reply("MYCODE custom text")`), []string{key})
	require.ErrorContains(t, err, "MYCODE custom text")
	got, err := g.Eval(t.Context(), counting, []string{key})
	require.NoError(t, err)
	assert.Equal(t, int64(1), got)
	_, err = g.Eval(t.Context(), driver.NewScript("cross", `return 1`), []string{"{a}", "{b}"})
	assert.ErrorContains(t, err, "CROSSSLOT", "keys of two slots")
}
