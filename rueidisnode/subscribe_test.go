package rueidisnode

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// proxied starts a fault proxy to addr, closed when the test ends.
func proxied(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func numSub(m *miniredis.Miniredis, channel string) int {
	return m.PubSubNumSub(channel)[channel]
}

// serverNumSub is numSub on a real server.
func serverNumSub(t *testing.T, d *redis.Client, channel string) int64 {
	n, err := d.PubSubNumSub(t.Context(), channel).Result()
	require.NoError(t, err)
	return n[channel]
}

// current is the hub's running subscription, nil while nobody waits.
func current(n *Node) *subscription {
	if n.hub.core.Current() == nil {
		return nil
	}
	n.hub.core.Lock()
	defer n.hub.core.Unlock()
	return n.hub.running
}

// idle waits until the hub has no subscription and its last goroutine has
// ended: an idle node holds no goroutine and no connection.
func idle(t *testing.T, n *Node, last *subscription) {
	t.Helper()
	assert.Nil(t, n.hub.core.Current(), "no subscription once the last waiter left")
	select {
	case <-last.done:
	case <-time.After(watchdog):
		t.Fatal("the hub's goroutine did not end after the last stop")
	}
}

// TestSubscribeStopsCleanly: subscriptions to several channels, one call
// with two, stops in any order, the connection and goroutine gone after
// the last one, and a new subscription afterwards.
func TestSubscribeStopsCleanly(t *testing.T) {
	m := miniredis.RunT(t)
	n := serverNode(t, m.Addr(), single)
	cbA, gotA := testwait.Payloads()
	stopA, err := n.Subscribe(t.Context(), cbA, "a")
	require.NoError(t, err)
	cbB, gotB := testwait.Payloads()
	stopB, err := n.Subscribe(t.Context(), cbB, "b", "c")
	require.NoError(t, err)
	sub := current(n)
	m.Publish("a", "to-a")
	assert.Equal(t, "to-a", testwait.Next(t, gotA))
	stopA()
	testwait.Until(t, `numSub(m, "a") == 0`, func() bool { return numSub(m, "a") == 0 })
	m.Publish("b", "to-b")
	assert.Equal(t, "to-b", testwait.Next(t, gotB))
	m.Publish("c", "to-c")
	assert.Equal(t, "to-c", testwait.Next(t, gotB))
	stopB()
	stopB() // stop is idempotent
	idle(t, n, sub)
	testwait.Until(t, "no subscription left on the node", func() bool { return len(m.PubSubChannels("*")) == 0 })

	stopA, err = n.Subscribe(t.Context(), cbA, "a") // a fresh connection
	require.NoError(t, err)
	m.Publish("a", "again")
	assert.Equal(t, "again", testwait.Next(t, gotA))
	sub = current(n)
	stopA()
	idle(t, n, sub)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = n.Subscribe(ctx, cbA, "a")
	assert.ErrorIs(t, err, context.Canceled)
	_, err = n.Subscribe(t.Context(), cbA)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "no channel")
}

// TestSubscribeOnServer: over a real server, in RESP3 and in RESP2 (where
// rueidis refuses a PING among pub/sub commands, and the hub relies on
// each SUBSCRIBE's own reply), a message published once Subscribe
// returned is delivered.
func TestSubscribeOnServer(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	d := direct(t, srv.Addr())
	for name, n := range map[string]*Node{"RESP3": serverNode(t, srv.Addr()), "RESP2": serverNode(t, srv.Addr(), resp2)} {
		t.Run(name, func(t *testing.T) {
			cb, got := testwait.Payloads()
			stop, err := n.Subscribe(t.Context(), cb, "server:"+name, "server:"+name+":other")
			require.NoError(t, err)
			require.NoError(t, d.Publish(t.Context(), "server:"+name, "hello").Err())
			assert.Equal(t, "hello", testwait.Next(t, got))
			require.NoError(t, d.Publish(t.Context(), "server:"+name+":other", "other").Err())
			assert.Equal(t, "other", testwait.Next(t, got))
			sub := current(n)
			stop()
			idle(t, n, sub)
		})
	}
}

// TestHubActivationIsExact: SUBSCRIBE c, UNSUBSCRIBE c (its only waiter
// gave up), SUBSCRIBE c (a new waiter). The node's reply to the first
// round must not make the new waiter's Subscribe return: the second
// SUBSCRIBE has not reached the node yet, and a release now would be
// missed. The proxy delays replies, then requests, to hold the three in
// that order.
func TestHubActivationIsExact(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxied(t, m.Addr())
	n := serverNode(t, p.Addr(), single)
	keep, err := n.Subscribe(t.Context(), func(string) {}, "other") // keeps the connection open
	require.NoError(t, err)
	defer keep()

	// A round trip of 4 slow stays within subscribeTimeout.
	const slow = 150 * time.Millisecond
	p.Set(faultproxy.Fault{Kind: faultproxy.Late, ReplyDelay: slow}) // replies lag
	ctx1, cancel1 := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := n.Subscribe(ctx1, func(string) {}, "c")
		first <- err
	}()
	testwait.Until(t, `numSub(m, "c") == 1`, func() bool { return numSub(m, "c") == 1 }) // SUBSCRIBE reached the node; its reply lags
	cancel1()
	require.ErrorIs(t, <-first, context.Canceled)
	testwait.Until(t, `numSub(m, "c") == 0`, func() bool { return numSub(m, "c") == 0 }) // UNSUBSCRIBE too

	p.Set(faultproxy.Fault{Kind: faultproxy.Late, Delay: 3 * slow, ReplyDelay: slow}) // the next SUBSCRIBE lags behind the first one's reply
	cb, got := testwait.Payloads()
	stop, err := n.Subscribe(t.Context(), cb, "c")
	require.NoError(t, err)
	defer stop()
	assert.Equal(t, 1, numSub(m, "c"), "Subscribe returned before its SUBSCRIBE reached the node")
	p.Set(faultproxy.Fault{})
	m.Publish("c", "after")
	assert.Equal(t, "after", testwait.Next(t, got), "a message after Subscribe returned is not missed")
}

// TestHubReconnectTellsWaiters: messages published while the pub/sub
// connection was down are lost; once the hub has reconnected and
// resubscribed, every waiter is told that a release may have happened
// (payload ""), and later messages arrive again. On a real redis-server
// behind a proxy that cuts the connection.
func TestHubReconnectTellsWaiters(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	p := proxied(t, srv.Addr())
	n := serverNode(t, p.Addr())
	d := direct(t, srv.Addr())

	cbX, gotX := testwait.Payloads()
	stopX, err := n.Subscribe(t.Context(), cbX, "x")
	require.NoError(t, err)
	defer stopX()
	cbY, gotY := testwait.Payloads()
	stopY, err := n.Subscribe(t.Context(), cbY, "y")
	require.NoError(t, err)
	defer stopY()

	p.Set(faultproxy.Fault{Kind: faultproxy.Cut})
	testwait.Until(t, "the server lost the subscription", func() bool { return serverNumSub(t, d, "x") == 0 })
	require.NoError(t, d.Publish(t.Context(), "x", "lost").Err())
	p.Set(faultproxy.Fault{})

	assert.Equal(t, "", testwait.Next(t, gotX), "x is told a release may have been missed")
	assert.Equal(t, int64(1), serverNumSub(t, d, "x"), "only once resubscribed")
	assert.Equal(t, int64(1), serverNumSub(t, d, "y"), "only once resubscribed")
	assert.Equal(t, "", testwait.Next(t, gotY), "so is every waiter")

	require.NoError(t, d.Publish(t.Context(), "x", "again").Err())
	for {
		if payload := testwait.Next(t, gotX); payload != "" { // another drop may add a "" or two
			assert.Equal(t, "again", payload)
			break
		}
	}
}

// TestSubscribeOnUnreachableNode: with the node off the network,
// Subscribe fails with the connection's error instead of waiting for its
// context, and the hub goes idle; once the node is back, Subscribe works
// again.
func TestSubscribeOnUnreachableNode(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxied(t, m.Addr())
	n := serverNode(t, p.Addr(), single)
	p.Set(faultproxy.Fault{Kind: faultproxy.Cut})
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	_, err := n.Subscribe(ctx, func(string) {}, "k")
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "failed before its context ended")
	testwait.Until(t, "the hub goes idle", func() bool { return current(n) == nil })

	p.Set(faultproxy.Fault{})
	cb, got := testwait.Payloads()
	stop, err := n.Subscribe(t.Context(), cb, "k")
	require.NoError(t, err)
	defer stop()
	m.Publish("k", "back")
	assert.Equal(t, "back", testwait.Next(t, got))
}
