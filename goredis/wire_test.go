package goredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
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

// wired is a node of its own connection over client c.
func wired(t *testing.T, c *redis.Client, opts ...Option) *wireNode {
	t.Helper()
	b := backend(t, c, opts...)
	w, ok := b.(*wireNode)
	require.True(t, ok, "New(%T) returned %T, want a node of its own connection", c, b)
	return w
}

// wiredBehind returns a node of its own connection to a miniredis behind
// a fault proxy (both returned too), its connection dialled (one Acquire of "warm") before
// fault is set on the proxy.
func wiredBehind(t *testing.T, fault faultproxy.Fault) (*wireNode, *faultproxy.Proxy, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	p, err := faultproxy.New(m.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	n := wired(t, redistest.Client(t, p.Addr()))
	_, err = n.Acquire(t.Context(), "warm", "tok", time.Minute)
	require.NoError(t, err)
	p.Set(fault)
	return n, p, m
}

func (w *wire) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.busy
}

// inFlight is the number of calls of the sender's batch in flight whose
// callers still wait.
func (w *wire) inFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live
}

func (w *wire) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func TestWireHandshake(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireUserAuth("locker", "s3cret")
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		Username: "locker", Password: "s3cret", DB: 3, ClientName: "redlock-test"})
	t.Cleanup(func() { c.Close() })
	n := wired(t, c)
	ok, err := n.Acquire(t.Context(), "k", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, m.DB(3).Exists("k"), "the key is in the client's database")
	assert.False(t, m.DB(0).Exists("k"))
}

func TestWireCredentialsProviderContext(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("pw")
	var asked atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		CredentialsProviderContext: func(ctx context.Context) (string, string, error) {
			asked.Add(1)
			return "", "pw", nil
		}})
	t.Cleanup(func() { c.Close() })
	ok, err := wired(t, c).Acquire(t.Context(), "k", "tok", time.Minute)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.EqualValues(t, 1, asked.Load())
}

func TestWireAuthFailure(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("right")
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, Password: "wrong"})
	t.Cleanup(func() { c.Close() })
	_, err := wired(t, c).Acquire(t.Context(), "k", "tok", time.Minute)
	require.Error(t, err)
	assert.ErrorContains(t, err, "handshake: AUTH")
	var re redis.Error
	assert.True(t, errors.As(err, &re), "the server's refusal (%v) is a redis.Error", err)
	assert.False(t, m.Exists("k"))
}

func TestWireClientName(t *testing.T) {
	s := redistest.Start(t, 1).Servers[0]
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ClientName: "redlock-wire"})
	t.Cleanup(func() { c.Close() })
	_, err := wired(t, c).Acquire(t.Context(), "k", "tok", time.Minute)
	require.NoError(t, err)
	list := clients(t, c)
	var ours bool
	for _, f := range list {
		ours = ours || (f["name"] == "redlock-wire" && f["cmd"] == "set")
	}
	assert.True(t, ours, "no connection named redlock-wire ran our SET:\n%v", list)
}

// TestWireLateReplyNeverAnswersTheNextCommand: a reply that comes after
// its call's deadline closed the connection; the next call redials, and
// gets its own answer, not the late one.
func TestWireLateReplyNeverAnswersTheNextCommand(t *testing.T) {
	n, p, m := wiredBehind(t, faultproxy.Fault{Kind: faultproxy.Late, ReplyDelay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := n.Acquire(ctx, "k", "first", time.Minute)
	require.Error(t, err, "the reply comes after the deadline")
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	testwait.Until(t, `m.Exists("k")`, func() bool { return m.Exists("k") })
	p.Set(faultproxy.Fault{Kind: faultproxy.Pass})

	ok, err := n.Acquire(t.Context(), "k", "second", time.Minute)
	require.NoError(t, err)
	assert.False(t, ok, "the key is held by the first SET: the late +OK was not taken for the second's answer")
	assert.EqualValues(t, 2, p.Stats().Conns, "the timed-out connection was closed and a new one dialled")
}

// scripted is a server that answers every command read on its i-th
// connection with replies[i], and counts the connections.
func scripted(t *testing.T, replies ...string) (addr string, conns *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns = new(atomic.Int64)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(conns.Add(1)) - 1
			wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if i < len(replies) {
						if _, err := io.WriteString(c, replies[i]); err != nil {
							return
						}
					}
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), conns
}

func TestWireMalformedReplyClosesTheConnection(t *testing.T) {
	for _, bad := range []string{"?bogus\r\n", "*2\r\n:1\r\n:2\r\n", "$3\r\nabcd\r\n", ":12x\r\n", "+OK\n"} {
		addr, conns := scripted(t, bad, "+OK\r\n")
		n := wired(t, redistest.Client(t, addr))
		_, err := n.Acquire(t.Context(), "k", "tok", time.Minute)
		assert.ErrorIs(t, err, errProtocol, "reply %q", bad)
		ok, err := n.Acquire(t.Context(), "k", "tok", time.Minute)
		require.NoError(t, err, "after %q", bad)
		assert.True(t, ok)
		assert.EqualValues(t, 2, conns.Load(), "the connection that gave %q was closed", bad)
	}
}

func TestWireUnexpectedReplyKind(t *testing.T) {
	for _, odd := range []string{":1\r\n", "$3\r\nabc\r\n"} { // SET answered with an integer, a string
		addr, _ := scripted(t, odd)
		n := wired(t, redistest.Client(t, addr))
		_, err := n.Acquire(t.Context(), "k", "tok", time.Minute)
		assert.ErrorIs(t, err, errProtocol, "reply %q", odd)
	}
}

// TestWireQueuedCallerWithdraws: a caller queued behind a batch in flight
// that gives up returns at once, and its command is never sent.
func TestWireQueuedCallerWithdraws(t *testing.T) {
	n, p, m := wiredBehind(t, faultproxy.Fault{Kind: faultproxy.Stall})

	// A started call, taken over by the sender when a second caller
	// queues: the sender is then in flight, reading, until the deadline.
	const d = 2 * time.Second
	ctx0, cancel0 := context.WithTimeout(t.Context(), d)
	defer cancel0()
	p0 := n.StartAcquire(ctx0, "first", "tok", time.Minute)
	done1 := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx0, "second", "tok", time.Minute); done1 <- err }()
	testwait.Until(t, `n.w.inFlight() == 2`, func() bool { return n.w.inFlight() == 2 })

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx, "queued", "tok", time.Minute); done <- err }()
	testwait.Until(t, `n.w.queued() == 1`, func() bool { return n.w.queued() == 1 })
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(watchdog):
		t.Fatal("the queued caller did not return when cancelled")
	}
	assert.Zero(t, n.w.queued())
	_, err := p0.Finish()
	assert.Error(t, err, "the stalled started call")
	assert.Error(t, <-done1, "the stalled batched call")
	testwait.Until(t, `n.w.idle()`, func() bool { return n.w.idle() })

	p.Set(faultproxy.Fault{Kind: faultproxy.Pass})
	// The commands written during the stall are delivered after it.
	testwait.Until(t, `m.Exists("second")`, func() bool { return m.Exists("second") })
	testwait.Until(t, `p.Pending() == 0`, func() bool { return p.Pending() == 0 })
	assert.True(t, m.Exists("first"))
	assert.False(t, m.Exists("queued"), "the withdrawn command was never sent")
}

// TestWireBatchCutShortWhenAllGaveUp: callers whose batch is in flight
// (here a started call taken over by the sender, and the call that
// queued behind it) return at once when they give up, and once the last
// one has, the sender stops waiting for the batch's replies.
func TestWireBatchCutShortWhenAllGaveUp(t *testing.T) {
	n, p, _ := wiredBehind(t, faultproxy.Fault{Kind: faultproxy.Stall})
	defer p.Set(faultproxy.Fault{Kind: faultproxy.Pass})

	const long = time.Minute
	ctx0, cancel0 := context.WithTimeout(t.Context(), long)
	defer cancel0()
	p0 := n.StartAcquire(ctx0, "started", "tok", time.Minute)
	ctx1, cancel1 := context.WithTimeout(t.Context(), long)
	defer cancel1()
	done1 := make(chan error, 1)
	go func() { _, err := n.Acquire(ctx1, "batched", "tok", time.Minute); done1 <- err }()
	testwait.Until(t, `n.w.inFlight() == 2`, func() bool { return n.w.inFlight() == 2 })

	cancel1()
	select {
	case err := <-done1:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(watchdog):
		t.Fatal("the batched caller did not return when cancelled")
	}
	cancel0()
	finished := make(chan error, 1)
	go func() { _, err := p0.Finish(); finished <- err }()
	select {
	case err := <-finished:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(watchdog):
		t.Fatal("the started call's Finish did not return when cancelled")
	}
	testwait.Until(t, `n.w.idle()`, func() bool { return n.w.idle() }) // long before the batch's minute
}

func TestWireClose(t *testing.T) {
	m := miniredis.RunT(t)
	n := wired(t, redistest.Client(t, m.Addr()))
	ok, err := n.Acquire(t.Context(), "k", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, m.CurrentConnectionCount())
	require.NoError(t, n.Close())
	testwait.Until(t, `m.CurrentConnectionCount() == 0`, func() bool { return m.CurrentConnectionCount() == 0 })
	_, err = n.Release(t.Context(), "k", "tok", false)
	assert.ErrorIs(t, err, net.ErrClosed)
	p := n.StartExtend(t.Context(), "k", "tok", time.Minute)
	_, err = p.Finish()
	assert.ErrorIs(t, err, net.ErrClosed)
}

func TestWireNoScript(t *testing.T) {
	s := redistest.Start(t, 1).Servers[0]
	c := redistest.Client(t, s.Addr())
	n := wired(t, c)
	ctx := t.Context()
	ok, err := n.Acquire(ctx, "k", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	ok, err = n.Extend(ctx, "k", "tok", time.Minute)
	require.NoError(t, err, "EXTEND after SCRIPT FLUSH falls back to EVAL")
	assert.True(t, ok)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	ok, err = n.StartRelease(ctx, "k", "tok", true).Finish()
	require.NoError(t, err, "a started release after SCRIPT FLUSH falls back to EVAL")
	assert.True(t, ok)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	ok, fence, err := n.AcquireFenced(ctx, "f", "tok", time.Minute)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.EqualValues(t, 1, fence)
	ok, err = n.RaiseFence(ctx, "f", "tok", 7)
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestWireKeepsGoRedisPathWhenItMust(t *testing.T) {
	addr := miniredis.RunT(t).Addr()
	onConnect := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		OnConnect: func(context.Context, *redis.Conn) error { return nil }})
	t.Cleanup(func() { onConnect.Close() })
	plain := redistest.Client(t, addr)
	for name, b := range map[string]redlock.Backend{
		"OnConnect":      backend(t, onConnect),
		"WithClientPool": backend(t, plain, WithClientPool()),
		"WithReplicaAck": backend(t, plain, WithReplicaAck(1, time.Millisecond)),
	} {
		n, ok := b.(*node)
		if assert.True(t, ok, "%s: New returned %T, want the go-redis node", name, b) {
			assert.Nil(t, n.w, name)
		}
		_, isStarter := b.(redlock.Starter)
		assert.False(t, isStarter, name)
	}
}

// TestWireAllocatesNothing: a command over the node's own connection
// allocates nothing, alone or started. (On a real server: miniredis, in
// the test's process, would count its own allocations.)
func TestWireAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates, and drops pooled objects")
	}
	n := wired(t, redistest.Client(t, redistest.Start(t, 1).Servers[0].Addr()))
	ctx := t.Context()
	allocs := testing.AllocsPerRun(200, func() {
		if ok, err := n.Acquire(ctx, "k", "tok", time.Minute); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if ok, err := n.StartRelease(ctx, "k", "tok", false).Finish(); err != nil || !ok {
			t.Fatal(ok, err)
		}
	})
	assert.Zero(t, allocs)
}

// TestWireQueuedCallerDoesNotWaitForAStartedCall: a call started and not
// yet finished (its caller reads other nodes first) does not hold up the
// callers that queue behind it: the sender writes their commands at once
// and reads the started call's reply on its behalf.
func TestWireQueuedCallerDoesNotWaitForAStartedCall(t *testing.T) {
	m := miniredis.RunT(t)
	n := wired(t, redistest.Client(t, m.Addr()))
	ctx := t.Context()
	p := n.StartAcquire(ctx, "started", "tok", time.Minute)
	done := make(chan error, 1)
	go func() {
		ok, err := n.Acquire(ctx, "queued", "tok", time.Minute)
		if err == nil && !ok {
			err = errors.New("refused")
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(watchdog):
		t.Fatal("the queued caller waited for the started call's Finish")
	}
	ok, err := p.Finish()
	require.NoError(t, err)
	assert.True(t, ok, "the started call's reply, read by the sender")
	assert.True(t, m.Exists("started"))
	testwait.Until(t, `n.w.idle()`, func() bool { return n.w.idle() })

	// Its caller giving up while the sender has it: Finish returns, and
	// the node goes on.
	short, cancel := context.WithCancel(ctx)
	p = n.StartRelease(short, "started", "tok", false)
	ok, err = n.Release(ctx, "queued", "tok", false) // takes p over
	require.NoError(t, err)
	assert.True(t, ok)
	cancel()
	if _, err := p.Finish(); err != nil {
		assert.ErrorIs(t, err, context.Canceled)
	}
	ok, err = n.Acquire(ctx, "after", "tok", time.Minute)
	require.NoError(t, err)
	assert.True(t, ok)
}

// unanswered is a client of a node whose every dial, like a connect to a
// host that drops SYNs, lasts until its context ends, or until release
// is closed, when it fails as refused. dials counts the dials begun,
// ended those that returned.
func unanswered(t *testing.T, release <-chan struct{}) (c *redis.Client, dials, ended *atomic.Int64) {
	dials, ended = new(atomic.Int64), new(atomic.Int64)
	c = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			defer ended.Add(1)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-release:
				return nil, errors.New("connection refused")
			}
		}})
	t.Cleanup(func() { _ = c.Close() })
	return c, dials, ended
}

// TestWireStartDoesNotDial: a started call on a connection that is not
// up returns before the dial ends (its sender dials), and Finish reports
// the dial's failure.
func TestWireStartDoesNotDial(t *testing.T) {
	release := make(chan struct{})
	c, dials, ended := unanswered(t, release)
	n := wired(t, c)
	// Bounded, so that a Start that dials returns (at the deadline, its
	// dial over) rather than waiting for release.
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	p := n.StartAcquire(ctx, "k", "tok", time.Minute)
	assert.Zero(t, ended.Load(), "StartAcquire returned only once the dial had ended")
	testwait.Until(t, "the sender dials", func() bool { return dials.Load() == 1 })
	close(release)
	ok, err := p.Finish()
	assert.False(t, ok)
	assert.ErrorContains(t, err, "connection refused")
	testwait.Until(t, `n.w.idle()`, func() bool { return n.w.idle() })
}

// TestRoundsWithANodeWhoseDialIsNeverAnswered: a Redlock of five nodes of
// their own connection, one of which never answers a dial (wherever it is
// in the list), still locks, extends and unlocks on the other four. Before
// start handed dials to the sender, that node's dial, made by the round's
// caller, lasted until the round's deadline, every node started after it
// found the deadline passed, and every round failed.
func TestRoundsWithANodeWhoseDialIsNeverAnswered(t *testing.T) {
	for _, at := range []int{0, 2, 4} {
		t.Run(fmt.Sprintf("at=%d", at), func(t *testing.T) {
			c, _, _ := unanswered(t, nil)
			l, others := beside(t, wired(t, c), at)
			roundsOnTheOthers(t, l, others)
		})
	}
}

// beside is a Redlock of five nodes, 200 ms node timeout, Reject: odd at
// index at, four miniredis (returned) on nodes of their own connection.
func beside(t *testing.T, odd redlock.Backend, at int) (redlock.Locker, []*miniredis.Miniredis) {
	t.Helper()
	var others []*miniredis.Miniredis
	var nodes []redlock.Backend
	for i := range 5 {
		if i == at {
			nodes = append(nodes, odd)
			continue
		}
		m := miniredis.RunT(t)
		others = append(others, m)
		nodes = append(nodes, wired(t, redistest.Client(t, m.Addr())))
	}
	l, err := redlock.New(nodes, redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(200*time.Millisecond),
		redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	return l, others
}

// roundsOnTheOthers makes three rounds of Lock, Extend and Unlock of "k"
// with l (the odd node redials in each), checking the key on the others
// after Lock and after Unlock.
func roundsOnTheOthers(t *testing.T, l redlock.Locker, others []*miniredis.Miniredis) {
	t.Helper()
	for round := range 3 {
		lock, err := l.Lock(t.Context(), "k")
		require.NoError(t, err, "round %d", round)
		for _, m := range others {
			assert.True(t, m.Exists("k"), "round %d: the key on %s", round, m.Addr())
		}
		require.NoError(t, lock.Extend(t.Context(), time.Minute), "round %d", round)
		require.NoError(t, lock.Unlock(t.Context()), "round %d", round)
		for _, m := range others {
			assert.False(t, m.Exists("k"), "round %d: the key left on %s", round, m.Addr())
		}
	}
}

// TestWireCallAbandonedWhileDialledIsNotSent: a started call whose caller
// gives up while the sender is still dialling is not written once the
// dial succeeds (nothing reaches the server, as for a caller that gave
// up before Start), and the connection dialled serves the next call.
func TestWireCallAbandonedWhileDialledIsNotSent(t *testing.T) {
	m := miniredis.RunT(t)
	release := make(chan struct{})
	var dials atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				<-release // the first dial lasts until the test lets it through
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = c.Close() })
	n := wired(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	p := n.StartAcquire(ctx, "k", "tok", time.Minute)
	testwait.Until(t, "the sender dials", func() bool { return dials.Load() == 1 })
	cancel()
	_, err := p.Finish()
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	testwait.Until(t, `n.w.idle()`, func() bool { return n.w.idle() })
	ok, err := n.Acquire(t.Context(), "next", "tok", time.Minute)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.True(t, m.Exists("next"))
	// Written, the SET would have come before "next" on the connection;
	// on a connection cut short, it may still reach the server later.
	assert.False(t, m.Exists("k"), "the abandoned SET was sent once the dial succeeded")
	assert.EqualValues(t, 1, dials.Load(), "the next call redialled: the dialled connection was cut short")
}

// TestWireStaysInStepUnderCancellation: callers of one node, started and
// blocking, queued, carried and batched, give up at random moments
// (before Start, while dialled for, in flight); after each, a pair of
// calls on a fresh key must read their own replies: the first SET NX
// granted, the second refused. A reply left unread on the connection
// would answer the next command instead (a granted SET's reply taken for
// a refused one, or the reverse). Seeded; bounded in calls.
func TestWireStaysInStepUnderCancellation(t *testing.T) {
	m := miniredis.RunT(t)
	n := wired(t, redistest.Client(t, m.Addr()))
	const workers, rounds = 4, 300
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	var fresh atomic.Int64
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
		wg.Go(func() {
			for r := range rounds {
				if t.Failed() {
					return
				}
				ctx, cancel := context.WithCancel(t.Context())
				if rng.IntN(4) == 0 {
					cancel() // before the call
				} else {
					time.AfterFunc(time.Duration(rng.IntN(300))*time.Microsecond, cancel)
				}
				key := fmt.Sprintf("gone:%d:%d", w, r)
				if rng.IntN(2) == 0 {
					p := n.StartAcquire(ctx, key, "tok", time.Minute)
					_, _ = p.Finish()
				} else {
					_, _ = n.Acquire(ctx, key, "tok", time.Minute)
				}
				cancel()
				check, done := context.WithTimeout(t.Context(), watchdog)
				v := fmt.Sprintf("check:%d", fresh.Add(1))
				p := n.StartAcquire(check, v, "tok", time.Minute)
				ok, err := p.Finish()
				if err != nil || !ok {
					t.Errorf("worker %d round %d: the first SET NX of %s: %v, %v; want granted", w, r, v, ok, err)
				}
				ok, err = n.Acquire(check, v, "tok", time.Minute)
				if err != nil || ok {
					t.Errorf("worker %d round %d: the second SET NX of %s: %v, %v; want refused", w, r, v, ok, err)
				}
				done()
			}
		})
	}
	wg.Wait()
	testwait.Until(t, `n.w.idle()`, func() bool { return n.w.idle() })
}

// TestRoundsWithAPartitionedNodeThatNeedsAGreeting: a master that asks
// for a password, partitioned (the forwarder stalls every connection,
// old and new) after its connection was dialled. Its next call times out
// and closes the connection; every call after it redials, and the dial's
// AUTH waits for a reply that does not come until the deadline. Made by
// the round's caller, that greeting held the other nodes' starts and
// failed every round; now Lock, Extend and Unlock go on with the other
// four, and after the partition heals the node takes part again.
func TestRoundsWithAPartitionedNodeThatNeedsAGreeting(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("pw")
	p, err := faultproxy.New(m.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	l, others := beside(t, wired(t, c), 0)
	lock, err := l.Lock(t.Context(), "warm") // dials every node, the greeting answered
	require.NoError(t, err)
	require.NoError(t, lock.Unlock(t.Context()))

	p.Set(faultproxy.Fault{Kind: faultproxy.Stall})
	roundsOnTheOthers(t, l, others)

	p.Set(faultproxy.Fault{Kind: faultproxy.Pass})
	testwait.Until(t, "the stalled commands delivered", func() bool { return p.Pending() == 0 })
	lock, err = l.Lock(t.Context(), "healed")
	require.NoError(t, err)
	assert.True(t, m.Exists("healed"), "the healed node took part again")
	require.NoError(t, lock.Unlock(t.Context()))
	assert.False(t, m.Exists("healed"))
}
