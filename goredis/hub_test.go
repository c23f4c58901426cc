package goredis

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// proxied starts a fault proxy to addr, closed when the test ends.
func proxied(t *testing.T, addr string) *faultproxy.Proxy {
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func numSub(m *miniredis.Miniredis, channel string) int {
	return m.PubSubNumSub(channel)[channel]
}

// TestHubPayloadReachesTheWaiter: the callback gets what was published,
// on each of the channels of one Subscribe.
func TestHubPayloadReachesTheWaiter(t *testing.T) {
	m := miniredis.RunT(t)
	g := adapt(t, redistest.Client(t, m.Addr()))
	cb, got := testwait.Payloads()
	stop, err := g.Subscribe(t.Context(), cb, "k", "l")
	require.NoError(t, err)
	defer stop()
	m.Publish("k", "token-1")
	assert.Equal(t, "token-1", testwait.Next(t, got))
	m.Publish("l", "token-2")
	assert.Equal(t, "token-2", testwait.Next(t, got))
}

// TestHubActivationIsExact: SUBSCRIBE c, UNSUBSCRIBE c (its only waiter
// gave up), SUBSCRIBE c (a new waiter). The node's reply to the first
// SUBSCRIBE must not make the new waiter's Subscribe return: the second
// SUBSCRIBE has not reached the node yet, and a release now would be
// missed. The proxy delays replies, then requests, to hold the three in
// that order.
func TestHubActivationIsExact(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxied(t, m.Addr())
	g := adapt(t, redistest.Client(t, p.Addr()))
	keep, err := g.Subscribe(t.Context(), func(string) {}, "other") // keeps the connection open
	require.NoError(t, err)
	defer keep()

	const slow = 300 * time.Millisecond
	p.Set(faultproxy.Fault{Kind: faultproxy.Late, ReplyDelay: slow}) // replies lag
	ctx1, cancel1 := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := g.Subscribe(ctx1, func(string) {}, "c")
		first <- err
	}()
	testwait.Until(t, `numSub(m, "c") == 1`, func() bool { return numSub(m, "c") == 1 }) // SUBSCRIBE reached the node; its reply lags
	cancel1()
	require.ErrorIs(t, <-first, context.Canceled)
	testwait.Until(t, `numSub(m, "c") == 0`, func() bool { return numSub(m, "c") == 0 }) // UNSUBSCRIBE too

	p.Set(faultproxy.Fault{Kind: faultproxy.Late, Delay: 3 * slow, ReplyDelay: slow}) // the next SUBSCRIBE lags behind the first one's reply
	cb, got := testwait.Payloads()
	stop, err := g.Subscribe(t.Context(), cb, "c")
	require.NoError(t, err)
	defer stop()
	assert.Equal(t, 1, numSub(m, "c"), "Subscribe returned before its SUBSCRIBE reached the node")
	p.Set(faultproxy.Fault{})
	m.Publish("c", "after")
	assert.Equal(t, "after", testwait.Next(t, got), "a release after Subscribe returned is not missed")
}

// stallingPubSub is a go-redis PubSub whose SUBSCRIBE of one channel hangs
// until the test lets it go, as a write stuck in the kernel would.
type stallingPubSub struct {
	pubSub
	channel string
	stuck   chan struct{} // closed when the SUBSCRIBE hangs
	release chan struct{}
	once    sync.Once
}

func (s *stallingPubSub) Subscribe(ctx context.Context, channels ...string) error {
	for _, c := range channels {
		if c == s.channel {
			s.once.Do(func() { close(s.stuck) })
			<-s.release
		}
	}
	return s.pubSub.Subscribe(ctx, channels...)
}

// TestHubDispatchDoesNotWaitForWrites: while the SUBSCRIBE of one key
// hangs, releases of another key are still dispatched, its waiter can
// stop, and a third waiter's Subscribe returns by its own deadline.
func TestHubDispatchDoesNotWaitForWrites(t *testing.T) {
	m := miniredis.RunT(t)
	g := adapt(t, redistest.Client(t, m.Addr()))
	stall := &stallingPubSub{channel: "b", stuck: make(chan struct{}), release: make(chan struct{})}
	g.hub.wrap = func(ps pubSub) pubSub { stall.pubSub = ps; return stall }
	released := false
	defer func() {
		if !released {
			close(stall.release)
		}
	}()

	cbA, gotA := testwait.Payloads()
	stopA, err := g.Subscribe(t.Context(), cbA, "a")
	require.NoError(t, err)

	cbB, gotB := testwait.Payloads()
	b := make(chan func(), 1)
	go func() {
		stop, err := g.Subscribe(t.Context(), cbB, "b")
		assert.NoError(t, err)
		b <- stop
	}()
	<-stall.stuck

	m.Publish("a", "to-a")
	assert.Equal(t, "to-a", testwait.Next(t, gotA), "dispatch went on while b's SUBSCRIBE hung")

	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	c := make(chan error, 1)
	go func() {
		_, err := g.Subscribe(short, func(string) {}, "c")
		c <- err
	}()
	select {
	case err := <-c:
		assert.ErrorIs(t, err, context.DeadlineExceeded, "c's Subscribe ended at its own deadline")
	case <-time.After(watchdog):
		t.Error("c's Subscribe did not return while b's SUBSCRIBE hung")
	}

	stopped := make(chan struct{})
	go func() { stopA(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(watchdog):
		t.Error("a's stop did not return while b's SUBSCRIBE hung")
	}

	close(stall.release)
	released = true
	stopB := <-b
	defer stopB()
	m.Publish("b", "to-b")
	assert.Equal(t, "to-b", testwait.Next(t, gotB))
}

// TestHubReconnectTellsWaiters: releases published while the pub/sub
// connection was down are lost; once go-redis has reconnected and
// resubscribed, every waiter is told that a release may have happened
// (payload ""), and later releases arrive again. On a real redis-server
// behind a proxy that cuts the connection.
func TestHubReconnectTellsWaiters(t *testing.T) {
	srv := redistest.Start(t, 1)
	p := proxied(t, srv.Servers[0].Addr())
	g := adapt(t, redistest.Client(t, p.Addr()))
	direct := redistest.Client(t, srv.Servers[0].Addr())

	cbX, gotX := testwait.Payloads()
	stopX, err := g.Subscribe(t.Context(), cbX, "x")
	require.NoError(t, err)
	defer stopX()
	cbY, gotY := testwait.Payloads()
	stopY, err := g.Subscribe(t.Context(), cbY, "y")
	require.NoError(t, err)
	defer stopY()

	p.Set(faultproxy.Fault{Kind: faultproxy.Cut})
	testwait.Until(t, "the condition", func() bool {
		n, err := direct.PubSubNumSub(t.Context(), "x").Result()
		return err == nil && n["x"] == 0
	})
	require.NoError(t, direct.Publish(t.Context(), "x", "lost").Err())
	p.Set(faultproxy.Fault{})

	assert.Equal(t, "", testwait.Next(t, gotX), "x is told a release may have been missed")
	n, err := direct.PubSubNumSub(t.Context(), "x", "y").Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"x": 1, "y": 1}, n,
		"only once resubscribed")
	assert.Equal(t, "", testwait.Next(t, gotY), "so is every waiter")

	require.NoError(t, direct.Publish(t.Context(), "x", "again").Err())
	for {
		if payload := testwait.Next(t, gotX); payload != "" { // another drop may add a "" or two
			assert.Equal(t, "again", payload)
			break
		}
	}
}

// TestHubRefusedSubscribe: a SUBSCRIBE the node refuses (an ACL user
// without the channel) fails Subscribe. The PING written after it is still
// answered, and must not confirm it: a waiter told that it is subscribed
// would sleep through every release. Locks still work, the releases
// unannounced.
func TestHubRefusedSubscribe(t *testing.T) {
	srv := redistest.Start(t, 1)
	admin := redistest.Client(t, srv.Servers[0].Addr())
	require.NoError(t, admin.Do(t.Context(), "acl", "setuser", "nochannels", "on", ">pw", "~*", "+@all", "resetchannels").Err())
	c := redis.NewClient(&redis.Options{Addr: srv.Servers[0].Addr(), Username: "nochannels", Password: "pw",
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	g := adapt(t, c)

	stop, err := g.Subscribe(t.Context(), func(string) {}, "k")
	require.Error(t, err, "Subscribe must fail when the node refused the SUBSCRIBE")
	assert.Contains(t, err.Error(), "NOPERM")
	assert.Nil(t, stop)
	s := newSingle(t, g, redlock.WithStrategy(redlock.Reject()))
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()), "a refused PUBLISH does not fail the release")
	assert.Zero(t, admin.Exists(t.Context(), "k").Val(), "released")
}

// TestDatabasesOfOneServer: databases of one server are one node, since
// they share the server's fate: same Name, so a Redlock refuses them as
// duplicates.
func TestDatabasesOfOneServer(t *testing.T) {
	m := miniredis.RunT(t)
	db := func(n int) driver.Node {
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), DB: n, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return adapt(t, c)
	}
	b0, b2 := db(0), db(2)
	assert.Equal(t, driver.Info{Name: m.Addr()}, b0.Info())
	assert.Equal(t, driver.Info{Name: m.Addr()}, b2.Info())
	_, err := redlock.New([]driver.Node{b0, b2, db(3)})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "three databases of one server are not three independent masters")
}

// TestNewRefusesClientsItCannotBound: a nil client, a nil option, a ring
// client (its keys are spread over masters), and clients that ignore
// context deadlines (a paused node would hold every call for the
// client's ReadTimeout), of every kind go-redis has.
func TestNewRefusesClientsItCannotBound(t *testing.T) {
	m := miniredis.RunT(t)
	plain := redis.NewClient(&redis.Options{Addr: m.Addr()})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}})
	timedRing := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}, ContextTimeoutEnabled: true})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { plain.Close(); ring.Close(); timedRing.Close(); cluster.Close() })
	for name, c := range map[string]redis.UniversalClient{"nil": nil, "client": plain, "ring": ring,
		"ring with timeouts": timedRing, "cluster": cluster} {
		b, err := New(c)
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		assert.Nil(t, b, name)
	}
	var nilClient *redis.Client
	_, err := New(nilClient)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a typed nil client")
	var nilCluster *redis.ClusterClient
	_, err = New(nilCluster)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a typed nil cluster client")
	_, err = New(redistest.Client(t, m.Addr()), nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a nil option")
	n, err := New(redistest.Client(t, m.Addr()))
	require.NoError(t, err, "a client that honours deadlines")
	assert.Equal(t, driver.Info{Name: m.Addr()}, n.Info())
}

// TestSubscribeStopsCleanly exercises the hub directly: subscriptions on
// several channels, stops in any order, a new subscription after the
// connection was closed, and none with a done context.
func TestSubscribeStopsCleanly(t *testing.T) {
	m := miniredis.RunT(t)
	g := adapt(t, redistest.Client(t, m.Addr()))
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	to := func(ch chan struct{}) func(string) {
		return func(string) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	stopA, err := g.Subscribe(t.Context(), to(a), "a")
	require.NoError(t, err)
	stopB, err := g.Subscribe(t.Context(), to(b), "b")
	require.NoError(t, err)
	m.Publish("a", "")
	<-a
	stopA()
	testwait.Until(t, `m.PubSubNumSub("a")["a"] == 0`, func() bool { return m.PubSubNumSub("a")["a"] == 0 })
	m.Publish("b", "")
	<-b
	stopB()
	testwait.Until(t, `len(m.PubSubChannels("*")) == 0`, func() bool { return len(m.PubSubChannels("*")) == 0 })
	stopB() // stop is idempotent

	stopA, err = g.Subscribe(t.Context(), to(a), "a") // a fresh connection
	require.NoError(t, err)
	m.Publish("a", "")
	<-a
	stopA()

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = g.Subscribe(ctx, to(a), "a")
	assert.ErrorIs(t, err, context.Canceled)
}

// clients returns the server's connections by id, each as the fields of
// its CLIENT LIST line.
func clients(t *testing.T, c *redis.Client) map[string]map[string]string {
	t.Helper()
	list, err := c.ClientList(t.Context()).Result()
	require.NoError(t, err)
	got := map[string]map[string]string{}
	for line := range strings.Lines(list) {
		f := map[string]string{}
		for kv := range strings.FieldsSeq(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		got[f["id"]] = f
	}
	return got
}

// subscribers returns the ids of the server's connections in pub/sub mode.
func subscribers(t *testing.T, c *redis.Client) []string {
	t.Helper()
	var ids []string
	for id, f := range clients(t, c) {
		if strings.Contains(f["flags"], "P") {
			ids = append(ids, id)
		}
	}
	return ids
}

// lingerNode returns a node of a fresh redis-server whose subscription
// lingers for linger, and a client of that server.
func lingerNode(t *testing.T, linger time.Duration) (*Node, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t, 1)
	direct := redistest.Client(t, srv.Servers[0].Addr())
	g := adapt(t, redistest.Client(t, srv.Servers[0].Addr()))
	g.hub.core.Linger = linger // before the first Subscribe
	return g, direct
}

// waitOnK subscribes a waiter (wait i of a test) to channel k on g, and
// returns its stop, what it hears, and the id of the server's one pub/sub
// connection.
func waitOnK(t *testing.T, g *Node, direct *redis.Client, i int) (func(), chan string, string) {
	t.Helper()
	cb, got := testwait.Payloads()
	stop, err := g.Subscribe(t.Context(), cb, "k")
	require.NoError(t, err)
	subs := subscribers(t, direct)
	require.Len(t, subs, 1, "wait %d: one pub/sub connection", i)
	return stop, got, subs[0]
}

// TestHubClosesItsConnection: without a linger, once the last waiter
// leaves, the node's pub/sub connection is closed and no goroutine of the
// hub is left; the next waiter has a connection of its own.
func TestHubClosesItsConnection(t *testing.T) {
	g, direct := lingerNode(t, 0)
	base := runtime.NumGoroutine()

	seen := map[string]bool{}
	for i := range 3 {
		stop, got, sub := waitOnK(t, g, direct, i)
		assert.False(t, seen[sub], "wait %d: a connection of its own", i)
		seen[sub] = true
		payload := fmt.Sprint("token-", i)
		require.NoError(t, direct.Publish(t.Context(), "k", payload).Err())
		assert.Equal(t, payload, testwait.Next(t, got))
		stop()
		assert.Nil(t, g.hub.core.Current(), "wait %d: no subscription once the last waiter left", i)
		testwait.Until(t, "the connection is closed", func() bool { return clients(t, direct)[sub] == nil })
		testwait.Until(t, "no goroutine of the hub left", func() bool { return runtime.NumGoroutine() <= base })
	}
}

// TestHubLingers: the last waiter to leave leaves the subscription up,
// its goroutines running (subscriptionLinger; a minute here): the next
// waiter of the key is subscribed at once, with no SUBSCRIBE written,
// and hears releases; the node's Close ends the lingering subscription,
// its goroutines and its connection.
func TestHubLingers(t *testing.T) {
	g, direct := lingerNode(t, time.Minute)
	base := runtime.NumGoroutine()

	var first string
	for i := range 3 {
		before := subscribes(t, direct)
		stop, got, sub := waitOnK(t, g, direct, i)
		if i == 0 {
			first = sub
		} else {
			assert.Equal(t, before, subscribes(t, direct), "wait %d: no SUBSCRIBE", i)
		}
		assert.Equal(t, first, sub, "wait %d: the lingering subscription's connection", i)
		payload := fmt.Sprint("token-", i)
		require.NoError(t, direct.Publish(t.Context(), "k", payload).Err())
		for p := testwait.Next(t, got); p != payload; p = testwait.Next(t, got) {
			assert.Equal(t, fmt.Sprint("token-", i-1), p, "at most the release published before the wait")
		}
		stop()
		require.NotNil(t, g.hub.core.Current(), "wait %d: the subscription lingers", i)
		assert.Equal(t, "1", clients(t, direct)[first]["sub"], "still subscribed")
	}

	require.NoError(t, g.Close())
	assert.Nil(t, g.hub.core.Current())
	testwait.Until(t, "the connection is closed", func() bool { return clients(t, direct)[first] == nil })
	testwait.Until(t, "no goroutine left", func() bool { return runtime.NumGoroutine() <= base })
}

// subscribes returns how many SUBSCRIBE commands the server ran.
func subscribes(t *testing.T, c *redis.Client) string {
	return strconv.Itoa(redistest.Calls(t, c, "subscribe"))
}

// TestHubLingeringConnectionDropped: a connection dropped while its
// subscription lingers is redialled by go-redis; the waiter that joined
// the subscription meanwhile is woken with "" (a release may have been
// missed) once it is resubscribed, and hears releases after.
func TestHubLingeringConnectionDropped(t *testing.T) {
	srv := redistest.Start(t, 1)
	direct := redistest.Client(t, srv.Servers[0].Addr())
	g := adapt(t, redistest.Client(t, srv.Servers[0].Addr()))
	g.hub.core.Linger = time.Minute // before the first Subscribe
	stop, err := g.Subscribe(t.Context(), func(string) {}, "k")
	require.NoError(t, err)
	subs := subscribers(t, direct)
	require.Len(t, subs, 1)
	stop()
	require.NotNil(t, g.hub.core.Current(), "lingering")
	cb, got := testwait.Payloads()
	stop, err = g.Subscribe(t.Context(), cb, "k")
	require.NoError(t, err)
	defer stop()
	n, err := direct.ClientKillByFilter(t.Context(), "ID", subs[0]).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	assert.Equal(t, "", testwait.Next(t, got), "the drop is told")
	testwait.Until(t, "resubscribed", func() bool { return len(subscribers(t, direct)) == 1 })
	require.NoError(t, direct.Publish(t.Context(), "k", "after").Err())
	assert.Equal(t, "after", testwait.Next(t, got))
}
