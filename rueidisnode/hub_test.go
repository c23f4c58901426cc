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
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func numSub(m *miniredis.Miniredis, key string) int {
	return m.PubSubNumSub(redlock.ReleaseChannel(key))[redlock.ReleaseChannel(key)]
}

// serverNumSub is numSub on a real server.
func serverNumSub(t *testing.T, direct *redis.Client, key string) int64 {
	n, err := direct.PubSubNumSub(t.Context(), redlock.ReleaseChannel(key)).Result()
	require.NoError(t, err)
	return n[redlock.ReleaseChannel(key)]
}

// idle waits until the hub has no subscription and its last goroutine has
// ended: an idle backend holds no goroutine and no connection.
func idle(t *testing.T, n *node, last *subscription) {
	t.Helper()
	assert.Nil(t, n.hub.core.Current(), "no subscription once the last waiter left")
	select {
	case <-last.done:
	case <-time.After(watchdog):
		t.Fatal("the hub's goroutine did not end after the last stop")
	}
}

// current is the hub's running subscription, nil while nobody waits.
func current(n *node) *subscription {
	if n.hub.core.Current() == nil {
		return nil
	}
	n.hub.core.Lock()
	defer n.hub.core.Unlock()
	return n.hub.running
}

// TestNotifyStopsCleanly: subscriptions on several keys, stops in any
// order, the connection and goroutine gone after the last one, and a new
// subscription afterwards.
func TestNotifyStopsCleanly(t *testing.T) {
	m := miniredis.RunT(t)
	n := adapt(t, client(t, m.Addr(), single))
	cbA, gotA := testwait.Payloads()
	stopA, err := n.Notify(t.Context(), "a", cbA)
	require.NoError(t, err)
	cbB, gotB := testwait.Payloads()
	stopB, err := n.Notify(t.Context(), "b", cbB)
	require.NoError(t, err)
	sub := current(n)
	m.Publish(redlock.ReleaseChannel("a"), "to-a")
	assert.Equal(t, "to-a", testwait.Next(t, gotA))
	stopA()
	testwait.Until(t, `numSub(m, "a") == 0`, func() bool { return numSub(m, "a") == 0 })
	m.Publish(redlock.ReleaseChannel("b"), "to-b")
	assert.Equal(t, "to-b", testwait.Next(t, gotB))
	stopB()
	stopB() // stop is idempotent
	idle(t, n, sub)
	testwait.Until(t, "no subscription left on the node", func() bool { return len(m.PubSubChannels("*")) == 0 })

	stopA, err = n.Notify(t.Context(), "a", cbA) // a fresh connection
	require.NoError(t, err)
	m.Publish(redlock.ReleaseChannel("a"), "again")
	assert.Equal(t, "again", testwait.Next(t, gotA))
	sub = current(n)
	stopA()
	idle(t, n, sub)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = n.Notify(ctx, "a", cbA)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestHubActivationIsExact: SUBSCRIBE c, UNSUBSCRIBE c (its only waiter
// gave up), SUBSCRIBE c (a new waiter). The node's reply to the first
// round must not make the new waiter's Notify return: the second
// SUBSCRIBE has not reached the node yet, and a release now would be
// missed. The proxy delays replies, then requests, to hold the three in
// that order.
func TestHubActivationIsExact(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxied(t, m.Addr())
	n := adapt(t, client(t, p.Addr(), single))
	keep, err := n.Notify(t.Context(), "other", func(string) {}) // keeps the connection open
	require.NoError(t, err)
	defer keep()

	// A round trip of 4 slow stays within subscribeTimeout.
	const slow = 150 * time.Millisecond
	p.Set(faultproxy.Fault{Kind: faultproxy.Late, ReplyDelay: slow}) // replies lag
	ctx1, cancel1 := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := n.Notify(ctx1, "c", func(string) {})
		first <- err
	}()
	testwait.Until(t, `numSub(m, "c") == 1`, func() bool { return numSub(m, "c") == 1 }) // SUBSCRIBE reached the node; its reply lags
	cancel1()
	require.ErrorIs(t, <-first, context.Canceled)
	testwait.Until(t, `numSub(m, "c") == 0`, func() bool { return numSub(m, "c") == 0 }) // UNSUBSCRIBE too

	p.Set(faultproxy.Fault{Kind: faultproxy.Late, Delay: 3 * slow, ReplyDelay: slow}) // the next SUBSCRIBE lags behind the first one's reply
	cb, got := testwait.Payloads()
	stop, err := n.Notify(t.Context(), "c", cb)
	require.NoError(t, err)
	defer stop()
	assert.Equal(t, 1, numSub(m, "c"), "Notify returned before its SUBSCRIBE reached the node")
	p.Set(faultproxy.Fault{})
	m.Publish(redlock.ReleaseChannel("c"), "after")
	assert.Equal(t, "after", testwait.Next(t, got), "a release after Notify returned is not missed")
}

// TestHubReconnectTellsWaiters: releases published while the pub/sub
// connection was down are lost; once the hub has reconnected and
// resubscribed, every waiter is told that a release may have happened
// (payload ""), and later releases arrive again. On a real redis-server
// behind a proxy that cuts the connection.
func TestHubReconnectTellsWaiters(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	p := proxied(t, srv.Addr())
	n := adapt(t, client(t, p.Addr()))
	direct := redistest.Client(t, srv.Addr())

	cbX, gotX := testwait.Payloads()
	stopX, err := n.Notify(t.Context(), "x", cbX)
	require.NoError(t, err)
	defer stopX()
	cbY, gotY := testwait.Payloads()
	stopY, err := n.Notify(t.Context(), "y", cbY)
	require.NoError(t, err)
	defer stopY()

	p.Set(faultproxy.Fault{Kind: faultproxy.Cut})
	testwait.Until(t, "the server lost the subscription", func() bool { return serverNumSub(t, direct, "x") == 0 })
	require.NoError(t, direct.Publish(t.Context(), redlock.ReleaseChannel("x"), "lost").Err())
	p.Set(faultproxy.Fault{})

	assert.Equal(t, "", testwait.Next(t, gotX), "x is told a release may have been missed")
	assert.Equal(t, int64(1), serverNumSub(t, direct, "x"), "only once resubscribed")
	assert.Equal(t, int64(1), serverNumSub(t, direct, "y"), "only once resubscribed")
	assert.Equal(t, "", testwait.Next(t, gotY), "so is every waiter")

	require.NoError(t, direct.Publish(t.Context(), redlock.ReleaseChannel("x"), "again").Err())
	for {
		if payload := testwait.Next(t, gotX); payload != "" { // another drop may add a "" or two
			assert.Equal(t, "again", payload)
			break
		}
	}
}

// TestNotifyOnUnreachableNode: with the node off the network, Notify
// fails with the connection's error instead of waiting for its context,
// stop after it is prompt, and the hub goes idle; once the node is back,
// Notify works again.
func TestNotifyOnUnreachableNode(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxied(t, m.Addr())
	n := adapt(t, client(t, p.Addr(), single))
	p.Set(faultproxy.Fault{Kind: faultproxy.Cut})
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	_, err := n.Notify(ctx, "k", func(string) {})
	require.Error(t, err)
	assert.NoError(t, ctx.Err(), "failed before its context ended")
	testwait.Until(t, "the hub goes idle", func() bool { return current(n) == nil })

	p.Set(faultproxy.Fault{})
	cb, got := testwait.Payloads()
	stop, err := n.Notify(t.Context(), "k", cb)
	require.NoError(t, err)
	defer stop()
	m.Publish(redlock.ReleaseChannel("k"), "back")
	assert.Equal(t, "back", testwait.Next(t, got))
}

// TestNewRefusesClientsItDoesNotSupport: a nil client, a client in
// cluster mode (miniredis answers CLUSTER SLOTS as a one-node cluster),
// and a standalone client with a replica.
func TestNewRefusesClientsItDoesNotSupport(t *testing.T) {
	b, err := New(nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "nil")
	assert.Nil(t, b)

	m := miniredis.RunT(t)
	cluster := client(t, m.Addr())
	require.Equal(t, rueidis.ClientModeCluster, cluster.Mode())
	b, err = New(cluster)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "cluster")
	assert.Nil(t, b)

	replica := miniredis.RunT(t)
	withReplica := client(t, m.Addr(), single, func(o *rueidis.ClientOption) {
		o.Standalone.ReplicaAddress = []string{replica.Addr()}
		o.SendToReplicas = func(rueidis.Completed) bool { return false }
	})
	b, err = New(withReplica)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "replicas")
	assert.Nil(t, b)

	// Options told with WithClientOption are checked, for a standalone
	// client too.
	for name, change := range map[string]func(*rueidis.ClientOption){
		"ConnLifetime": func(o *rueidis.ClientOption) { o.ConnLifetime = time.Hour },
		"sentinel":     func(o *rueidis.ClientOption) { o.Sentinel.MasterSet = "mymaster" },
	} {
		opt := clientOption([]string{m.Addr()}, single)
		change(&opt)
		b, err = New(client(t, m.Addr(), single), WithClientOption(opt))
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		assert.Nil(t, b)
	}
	b, err = New(client(t, m.Addr(), single), WithClientOption(clientOption([]string{m.Addr()}, single)))
	require.NoError(t, err)
	assert.Equal(t, m.Addr(), b.Name(), "a standalone node keeps its address as its name")
}

// TestDatabasesOfOneServer: databases of one server are one node, since
// they share the server's fate: same Name, so a Redlock refuses them as
// duplicates.
func TestDatabasesOfOneServer(t *testing.T) {
	m := miniredis.RunT(t)
	db := func(n int) redlock.Backend {
		return adapt(t, client(t, m.Addr(), single, func(o *rueidis.ClientOption) { o.SelectDB = n }))
	}
	b0, b2 := db(0), db(2)
	assert.Equal(t, m.Addr(), b0.Name())
	assert.Equal(t, m.Addr(), b2.Name())
	_, err := redlock.New([]redlock.Backend{b0, b2, db(3)})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "three databases of one server are not three independent masters")
}
