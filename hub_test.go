package redlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/internal/latencyproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// payloads returns a callback for Notify that hands every payload to the
// returned channel (dropping them if the test does not keep up).
func payloads() (func(string), chan string) {
	ch := make(chan string, 64)
	return func(p string) {
		select {
		case ch <- p:
		default:
		}
	}, ch
}

// next returns the next payload, failing the test after the watchdog.
func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(watchdog):
		t.Fatal("no notification")
		return ""
	}
}

// proxied starts a latency proxy to addr, closed when the test ends.
func proxied(t *testing.T, addr string) *latencyproxy.Proxy {
	p, err := latencyproxy.New(func() string { return addr })
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func numSub(m *miniredis.Miniredis, key string) int {
	return m.PubSubNumSub(ReleaseChannel(key))[ReleaseChannel(key)]
}

// TestHubPayloadReachesTheWaiter: the callback gets what was published.
func TestHubPayloadReachesTheWaiter(t *testing.T) {
	m := miniredis.RunT(t)
	g := NewBackend(client(t, m.Addr())).(*goRedis)
	cb, got := payloads()
	stop, err := g.Notify(t.Context(), "k", cb)
	require.NoError(t, err)
	defer stop()
	m.Publish(ReleaseChannel("k"), "token-1")
	assert.Equal(t, "token-1", next(t, got))
}

// TestHubActivationIsExact: SUBSCRIBE c, UNSUBSCRIBE c (its only waiter
// gave up), SUBSCRIBE c (a new waiter). The node's reply to the first
// SUBSCRIBE must not make the new waiter's Notify return: the second
// SUBSCRIBE has not reached the node yet, and a release now would be
// missed. The proxy delays replies, then requests, to hold the three in
// that order.
func TestHubActivationIsExact(t *testing.T) {
	m := miniredis.RunT(t)
	p := proxied(t, m.Addr())
	g := NewBackend(client(t, p.Addr())).(*goRedis)
	keep, err := g.Notify(t.Context(), "other", func(string) {}) // keeps the connection open
	require.NoError(t, err)
	defer keep()

	const slow = 300 * time.Millisecond
	p.SetDelay(0, slow) // replies lag
	ctx1, cancel1 := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := g.Notify(ctx1, "c", func(string) {})
		first <- err
	}()
	waitUntil(t, func() bool { return numSub(m, "c") == 1 }) // SUBSCRIBE reached the node; its reply lags
	cancel1()
	require.ErrorIs(t, <-first, context.Canceled)
	waitUntil(t, func() bool { return numSub(m, "c") == 0 }) // UNSUBSCRIBE too

	p.SetDelay(3*slow, slow) // the next SUBSCRIBE lags behind the first one's reply
	cb, got := payloads()
	stop, err := g.Notify(t.Context(), "c", cb)
	require.NoError(t, err)
	defer stop()
	assert.Equal(t, 1, numSub(m, "c"), "Notify returned before its SUBSCRIBE reached the node")
	p.SetDelay(0, 0)
	m.Publish(ReleaseChannel("c"), "after")
	assert.Equal(t, "after", next(t, got), "a release after Notify returned is not missed")
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
// stop, and a third waiter's Notify returns by its own deadline.
func TestHubDispatchDoesNotWaitForWrites(t *testing.T) {
	m := miniredis.RunT(t)
	g := NewBackend(client(t, m.Addr())).(*goRedis)
	stall := &stallingPubSub{channel: ReleaseChannel("b"), stuck: make(chan struct{}), release: make(chan struct{})}
	g.hub.wrap = func(ps pubSub) pubSub { stall.pubSub = ps; return stall }
	released := false
	defer func() {
		if !released {
			close(stall.release)
		}
	}()

	cbA, gotA := payloads()
	stopA, err := g.Notify(t.Context(), "a", cbA)
	require.NoError(t, err)

	cbB, gotB := payloads()
	b := make(chan func(), 1)
	go func() {
		stop, err := g.Notify(t.Context(), "b", cbB)
		assert.NoError(t, err)
		b <- stop
	}()
	<-stall.stuck

	m.Publish(ReleaseChannel("a"), "to-a")
	assert.Equal(t, "to-a", next(t, gotA), "dispatch went on while b's SUBSCRIBE hung")

	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	c := make(chan error, 1)
	go func() {
		_, err := g.Notify(short, "c", func(string) {})
		c <- err
	}()
	select {
	case err := <-c:
		assert.ErrorIs(t, err, context.DeadlineExceeded, "c's Notify ended at its own deadline")
	case <-time.After(watchdog):
		t.Error("c's Notify did not return while b's SUBSCRIBE hung")
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
	m.Publish(ReleaseChannel("b"), "to-b")
	assert.Equal(t, "to-b", next(t, gotB))
}

// TestHubReconnectTellsWaiters: releases published while the pub/sub
// connection was down are lost; once go-redis has reconnected and
// resubscribed, every waiter is told that a release may have happened
// (payload ""), and later releases arrive again. On a real redis-server
// behind a proxy that cuts the connection.
func TestHubReconnectTellsWaiters(t *testing.T) {
	srv := redistest.Start(t, 1)
	p := proxied(t, srv.Servers[0].Addr())
	g := NewBackend(client(t, p.Addr())).(*goRedis)
	direct := client(t, srv.Servers[0].Addr())

	cbX, gotX := payloads()
	stopX, err := g.Notify(t.Context(), "x", cbX)
	require.NoError(t, err)
	defer stopX()
	cbY, gotY := payloads()
	stopY, err := g.Notify(t.Context(), "y", cbY)
	require.NoError(t, err)
	defer stopY()

	p.Cut()
	waitUntil(t, func() bool {
		n, err := direct.PubSubNumSub(t.Context(), ReleaseChannel("x")).Result()
		return err == nil && n[ReleaseChannel("x")] == 0
	})
	require.NoError(t, direct.Publish(t.Context(), ReleaseChannel("x"), "lost").Err())
	p.Release()

	assert.Equal(t, "", next(t, gotX), "x is told a release may have been missed")
	n, err := direct.PubSubNumSub(t.Context(), ReleaseChannel("x"), ReleaseChannel("y")).Result()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{ReleaseChannel("x"): 1, ReleaseChannel("y"): 1}, n,
		"only once resubscribed")
	assert.Equal(t, "", next(t, gotY), "so is every waiter")

	require.NoError(t, direct.Publish(t.Context(), ReleaseChannel("x"), "again").Err())
	for {
		if payload := next(t, gotX); payload != "" { // another drop may add a "" or two
			assert.Equal(t, "again", payload)
			break
		}
	}
}

// TestDatabasesOfOneServer: databases of one server are one node (a
// Redlock refuses them as duplicates, since they share the server's fate),
// but their keys are different keys, so a process's waiters stand in
// different lines.
func TestDatabasesOfOneServer(t *testing.T) {
	m := miniredis.RunT(t)
	db := func(n int) Backend {
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), DB: n, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return NewBackend(c)
	}
	b0, b2 := db(0), db(2)
	assert.Equal(t, m.Addr(), b0.Name())
	assert.Equal(t, m.Addr(), b2.Name())
	assert.NotEqual(t, lineID("k", []Backend{b0}), lineID("k", []Backend{b2}))
	_, err := New([]Backend{b0, b2, db(3)})
	assert.ErrorIs(t, err, ErrInvalid, "three databases of one server are not three independent masters")

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}, DB: 1})
	t.Cleanup(func() { ring.Close() })
	assert.NotEqual(t, lineID("k", []Backend{NewBackend(ring)}), lineID("k", []Backend{b0}))
}
