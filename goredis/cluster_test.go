package goredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/backendtest"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fresh returns a key of its own for a test, without a hash tag.
func fresh(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + ":" + hex.EncodeToString(b[:])
}

// TestClusterSlotMatchesRedis: slot agrees with CLUSTER KEYSLOT.
func TestClusterSlotMatchesRedis(t *testing.T) {
	_, cc := clusterBackend(t)
	keys := []string{"", "a", "order:42", "{order:42}", "order:{42}:fence", "a{}b", "{}{x}", "x{y}z", "123456789", "über"}
	for i := range 200 {
		keys = append(keys, fresh(strconv.Itoa(i)))
	}
	for _, k := range keys {
		want, err := cc.ClusterKeySlot(t.Context(), k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, int64(slot(k)), "%q", k)
	}
}

// TestClusterNodeName: one name per cluster, whatever the seeds' order
// or repetitions, so a Redlock refuses two clients of one cluster.
func TestClusterNodeName(t *testing.T) {
	client := func(addrs ...string) redlock.Backend {
		cc := redistest.ClusterClient(t, addrs...)
		b, err := New(cc)
		require.NoError(t, err)
		return b
	}
	a := client("127.0.0.1:7001", "127.0.0.1:7000", "127.0.0.1:7002")
	b := client("127.0.0.1:7002", "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000")
	assert.Equal(t, "cluster[127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002]", a.Name())
	assert.Equal(t, a.Name(), b.Name())
	s := adapt(t, redistest.Client(t, "127.0.0.1:7100"))
	_, err := redlock.New([]redlock.Backend{a, b, s})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two clients of one cluster are one node")
}

// TestClusterKeysOnTheWire: what a lock leaves on the cluster, for a key
// with a tag and one without, and that the announcement is SPUBLISHed on
// the channel of the key as the cluster sees it.
func TestClusterKeysOnTheWire(t *testing.T) {
	g, cc := clusterBackend(t)
	ctx := t.Context()
	untagged := fresh("wire")
	tagged := "wire:{" + fresh("t") + "}"
	for key, wire := range map[string]string{untagged: "{" + untagged + "}", tagged: tagged} {
		ps := cc.SSubscribe(ctx, redlock.ReleaseChannel(wire))
		_, err := ps.Receive(ctx) // the ssubscribe confirmation: active
		require.NoError(t, err)

		ok, fence, err := g.AcquireFenced(ctx, key, "tok-1", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, int64(1), fence)
		assert.Equal(t, "tok-1", cc.Get(ctx, wire).Val(), "the lock key of %q on the cluster", key)
		assert.Equal(t, "1", cc.Get(ctx, wire+fenceSuffix).Val(), "the fence counter of %q", key)
		ok, err = g.RaiseFence(ctx, key, "tok-1", 7)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "7", cc.Get(ctx, wire+fenceSuffix).Val())
		ok, err = g.Extend(ctx, key, "tok-1", 2*time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Greater(t, cc.PTTL(ctx, wire).Val(), time.Minute)

		ok, err = g.Release(ctx, key, "tok-1", true)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Zero(t, cc.Exists(ctx, wire).Val())
		msg, err := ps.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, redlock.ReleaseChannel(wire), msg.Channel)
		assert.Equal(t, "tok-1", msg.Payload)
		require.NoError(t, ps.Close())

		ok, err = g.Acquire(ctx, key, "tok-2", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "tok-2", cc.Get(ctx, wire).Val())
		ok, err = g.Release(ctx, key, "tok-2", false)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// TestClusterRefusesKeys: a key whose names would land in different slots
// is refused by every method before anything is sent, with ErrInvalid; a
// Single over the node fails with it too.
func TestClusterRefusesKeys(t *testing.T) {
	g, _ := clusterBackend(t)
	ctx := t.Context()
	for _, key := range []string{"order:{}", "}order"} {
		_, err := g.Acquire(ctx, key, "t", time.Second)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Acquire %q", key)
		_, _, err = g.AcquireFenced(ctx, key, "t", time.Second)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "AcquireFenced %q", key)
		_, err = g.RaiseFence(ctx, key, "t", 3)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "RaiseFence %q", key)
		_, err = g.Extend(ctx, key, "t", time.Second)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Extend %q", key)
		_, err = g.Release(ctx, key, "t", true)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Release %q", key)
		stop, err := g.Notify(ctx, key, func(string) {})
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Notify %q", key)
		assert.Nil(t, stop)

		s, err := redlock.NewSingle(g, redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		_, err = s.Lock(ctx, key)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Lock %q", key)
		var qe *redlock.QuorumError
		assert.False(t, errors.As(err, &qe), "refused before any round (KeyChecker)")

		// In a Redlock with two standalone masters, which could grant it
		// alone, the key is refused too: not a lock that has lost a node.
		r, err := redlock.New([]redlock.Backend{g, standalone(t), standalone(t)}, redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		assert.ErrorIs(t, r.Do(ctx, key, func(context.Context) error { return nil }), redlock.ErrInvalid, "Do %q", key)
		_, err = r.Lock(ctx, key)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "Lock %q", key)
	}
	assert.Empty(t, g.hubs, "no subscription for a refused key")
}

// TestClusterReleaseDoesNotBroadcast: an announced release is one SPUBLISH
// on the master that owns the key, reaching its sharded subscribers, and
// no PUBLISH, which a cluster would forward to every node: a plain
// SUBSCRIBE on every server of the cluster hears nothing (and does hear a
// PUBLISH, the control). Only the owner has the hub's SSUBSCRIBE.
func TestClusterReleaseDoesNotBroadcast(t *testing.T) {
	cl := redisCluster(t)
	g, cc := clusterBackend(t)
	ctx := t.Context()
	key := fresh("broadcast")
	wire, channel := "{"+key+"}", redlock.ReleaseChannel("{"+key+"}")
	owner, err := cc.MasterForKey(ctx, wire)
	require.NoError(t, err)

	cb, got := testwait.Payloads()
	stop, err := g.Notify(ctx, key, cb)
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

	ok, err := g.Acquire(ctx, key, "tok-b", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = g.Release(ctx, key, "tok-b", true)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "tok-b", testwait.Next(t, got), "the sharded subscriber hears the release")

	for addr := range publishes {
		assert.Equal(t, publishes[addr], redistest.Calls(t, servers[addr], "publish"), "PUBLISH calls on %s", addr)
		want := spublishes[addr]
		if addr == owner.Options().Addr {
			want++
		}
		assert.Equal(t, want, redistest.Calls(t, servers[addr], "spublish"), "SPUBLISH calls on %s", addr)
	}
	for addr, ps := range plain {
		msg, err := ps.ReceiveTimeout(ctx, backendtest.Quiet)
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

// gatedPings holds the hub's PINGs until released, to show that Notify
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
// SSUBSCRIBE is written and confirmed by the node, yet Notify does not
// return; once the PING is written and answered it does, and a release
// made right then reaches the waiter.
func TestClusterActivationWaitsForPong(t *testing.T) {
	g, cc := clusterBackend(t)
	key := fresh("activation")
	wire := "{" + key + "}"
	gate := make(chan struct{})
	h := g.slotHub(slot(wire))
	h.wrap = func(ps pubSub) pubSub { return gatedPings{ps, gate} }

	cb, got := testwait.Payloads()
	type result struct {
		stop func()
		err  error
	}
	done := make(chan result, 1)
	go func() {
		stop, err := g.Notify(t.Context(), key, cb)
		done <- result{stop, err}
	}()
	owner, err := cc.MasterForKey(t.Context(), wire)
	require.NoError(t, err)
	numSub := func() int64 {
		return owner.PubSubShardNumSub(t.Context(), redlock.ReleaseChannel(wire)).Val()[redlock.ReleaseChannel(wire)]
	}
	deadline := time.Now().Add(watchdog)
	for numSub() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, int64(1), numSub(), "the SSUBSCRIBE reached the owner")
	select {
	case r := <-done:
		if r.stop != nil {
			r.stop()
		}
		t.Fatalf("Notify returned (%v) before its PING was answered", r.err)
	case <-time.After(backendtest.Quiet):
	}
	close(gate)
	r := <-done
	require.NoError(t, r.err)
	defer r.stop()
	ok, err := g.Acquire(t.Context(), key, "tok-a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = g.Release(t.Context(), key, "tok-a", true)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "tok-a", testwait.Next(t, got))
}

// TestClusterActivationRace: on keys all over the cluster, a release made
// as soon as Notify returns is heard, every time; keys of one slot share
// a connection, and each slot has its own.
func TestClusterActivationRace(t *testing.T) {
	g, _ := clusterBackend(t)
	tag := fresh("shared")
	var wg sync.WaitGroup
	slots := map[uint16]bool{}
	for i := range 40 {
		key := fresh("race")
		if i%4 == 0 {
			key = "race:{" + tag + "}:" + strconv.Itoa(i) // ten keys of one slot
		}
		k, err := clusterKey(key)
		require.NoError(t, err)
		slots[slot(k)] = true
		wg.Go(func() {
			cb, got := testwait.Payloads()
			stop, err := g.Notify(t.Context(), key, cb)
			if !assert.NoError(t, err) {
				return
			}
			defer stop()
			tok := "tok-" + key
			ok, err := g.Acquire(t.Context(), key, tok, time.Minute)
			if assert.NoError(t, err) && assert.True(t, ok) {
				ok, err = g.Release(t.Context(), key, tok, true)
				assert.NoError(t, err)
				assert.True(t, ok)
				select {
				case p := <-got:
					assert.Equal(t, tok, p)
				case <-time.After(watchdog):
					t.Errorf("%s: the release right after Notify returned was missed", key)
				}
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
// Notify instead of being confirmed by the PING that follows it; the
// hub reopens its connection (reopen), its other waiter stays subscribed,
// and a new Notify of the same key subscribes again.
func TestClusterRefusedSubscription(t *testing.T) {
	g, cc := clusterBackend(t)
	ctx := t.Context()
	tag := fresh("moved")
	first, second := "moved:{"+tag+"}:1", "moved:{"+tag+"}:2"
	owner, err := cc.MasterForKey(ctx, first)
	require.NoError(t, err)
	var foreign string
	for i := 0; foreign == ""; i++ {
		ch := redlock.ReleaseChannel("{" + fresh(strconv.Itoa(i)) + "}")
		m, err := cc.MasterForKey(ctx, ch)
		require.NoError(t, err)
		if m.Options().Addr != owner.Options().Addr {
			foreign = ch
		}
	}
	armed := make(chan struct{})
	h := g.slotHub(slot(first))
	used := new(atomic.Bool) // once, also over the connection the hub reopens after MOVED
	h.wrap = func(ps pubSub) pubSub { return movedPubSub{ps, armed, foreign, used} }

	cb1, got1 := testwait.Payloads()
	stop1, err := g.Notify(ctx, first, cb1)
	require.NoError(t, err)
	defer stop1()
	close(armed)
	_, err = g.Notify(ctx, second, func(string) {})
	require.Error(t, err, "Notify must fail when the node refused its SSUBSCRIBE")
	assert.Contains(t, err.Error(), "MOVED")

	cb2, got2 := testwait.Payloads()
	stop2, err := g.Notify(ctx, second, cb2) // subscribes again, for real
	require.NoError(t, err)
	defer stop2()
	for i, key := range []string{first, second} {
		tok := fmt.Sprintf("tok-%d", i)
		ok, err := g.Acquire(ctx, key, tok, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = g.Release(ctx, key, tok, true)
		require.NoError(t, err)
		require.True(t, ok)
		got := []chan string{got1, got2}[i]
		for p := testwait.Next(t, got); p != tok; p = testwait.Next(t, got) {
			assert.Empty(t, p, "only a resynchronisation's call may come first")
		}
	}
}

// silent hides a node's Notifier: its releases wake nobody.
type silent struct {
	redlock.Backend
	redlock.Fencer
}

// mixed returns a Redlock's nodes: the shared cluster and two standalone
// masters.
func mixed(t *testing.T) (*clusterNode, []redlock.Backend) {
	g, _ := clusterBackend(t)
	s := redistest.Start(t, 2)
	return g, []redlock.Backend{g, adapt(t, redistest.Client(t, s.Addrs()[0])), adapt(t, redistest.Client(t, s.Addrs()[1]))}
}

// TestClusterInRedlockContention: goroutines increment a counter
// non-atomically under a fenced lock of a Redlock of one cluster and two
// standalone masters, on a key with a hash tag and one without: no
// update is lost, no two holders overlap, and fencing tokens go up
// strictly from holder to holder.
func TestClusterInRedlockContention(t *testing.T) {
	_, nodes := mixed(t)
	r, err := redlock.New(nodes, redlock.WithTTL(5*time.Second), redlock.WithFencing(),
		redlock.WithStrategy(redlock.Retry(60, 2*time.Millisecond)))
	require.NoError(t, err)
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

// TestClusterHandoff: a waiter whose next attempt is ten seconds away is
// woken by the release, heard over SSUBSCRIBE: over the cluster alone,
// over a Redlock of the cluster and two masters, and over that Redlock
// with the masters silent, so that only the cluster's announcement can
// wake it.
func TestClusterHandoff(t *testing.T) {
	g, nodes := mixed(t)
	for name, ns := range map[string][]redlock.Backend{
		"single":        {g},
		"redlock":       nodes,
		"redlock-quiet": {nodes[0], silent{nodes[1], nodes[1].(redlock.Fencer)}, silent{nodes[2], nodes[2].(redlock.Fencer)}},
	} {
		t.Run(name, func(t *testing.T) {
			var lk redlock.Locker
			var err error
			if len(ns) == 1 {
				lk, err = redlock.NewSingle(ns[0], redlock.WithTTL(time.Minute))
			} else {
				lk, err = redlock.New(ns, redlock.WithTTL(time.Minute))
			}
			require.NoError(t, err)
			key := fresh("handoff")
			held, err := lk.Lock(t.Context(), key)
			require.NoError(t, err)

			type result struct {
				l   *redlock.Lock
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				l, err := lk.Lock(t.Context(), key, redlock.WithStrategy(redlock.Retry(1, 10*time.Second)))
				done <- result{l, err, time.Now()}
			}()
			time.Sleep(300 * time.Millisecond) // the waiter has failed its first attempt and subscribed
			released := time.Now()
			require.NoError(t, held.Unlock(t.Context()))
			select {
			case r := <-done:
				require.NoError(t, r.err)
				require.NoError(t, r.l.Unlock(t.Context()))
				assert.Less(t, r.at.Sub(released), 5*time.Second, "woken by the release, not by its backoff")
			case <-time.After(9 * time.Second):
				t.Fatal("the waiter slept through the release: the announcement did not wake it")
			}
		})
	}
}
