package redlock_test

// Regression tests for the safety review: each shows one way a
// real network or a real client library could make the lock lie, using
// only what such a network delivers: a command delivered after its client
// gave up, a reply lost after the command ran, a command resent on a new
// connection.

import (
	"context"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateDelivery is a fault for a fake node: while late is set, its Acquire
// and Release calls do not reach the node; the caller gets a timeout, as
// after a network that holds its packets, and the calls are kept to be
// delivered by deliver, after the caller gave up, as TCP delivers data in
// flight.
type lateDelivery struct {
	mu      sync.Mutex
	late    bool
	pending []fakenode.Call
}

// lateNode wraps b with a lateDelivery, late from the start.
func lateNode(b driver.Node) (driver.Node, *lateDelivery) {
	d := &lateDelivery{late: true}
	n := fakenode.Wrap(b)
	n.SetHook(d.hook)
	return fakenode.Silent(n), d
}

func (d *lateDelivery) hook(ctx context.Context, c fakenode.Call) fakenode.Result {
	d.mu.Lock()
	if d.late && (c.Op == fakenode.Acquire || c.Op == fakenode.Release) {
		d.pending = append(d.pending, c)
		d.mu.Unlock()
		return fakenode.Result{Err: context.DeadlineExceeded}
	}
	d.mu.Unlock()
	return c.Send(ctx)
}

// onTime stops holding calls; deliver then sends the held ones.
func (d *lateDelivery) onTime() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.late = false
}

func (d *lateDelivery) deliver() {
	d.mu.Lock()
	pending := d.pending
	d.pending = nil
	d.mu.Unlock()
	for _, c := range pending {
		c.Send(context.Background())
	}
}

// holdersOf counts the nodes whose key holds token.
func holdersOf(t *testing.T, ms []*miniredis.Miniredis, key, token string) int {
	t.Helper()
	n := 0
	for _, m := range ms {
		if v, err := m.Get(key); err == nil && v == token {
			n++
		}
	}
	return n
}

// TestLateReleaseOfAnEarlierAttemptCannotDeleteTheLock is finding 1. N = 3;
// during attempt 1 two nodes are slow: their SET and the rollback's release
// time out on the client and are delivered later. Attempt 2 takes all
// three nodes. Then the late commands land. With one token for every
// attempt of the call, attempt 1's late release deleted attempt 2's keys
// on the slow nodes, leaving the holder on one node of three while it
// believed it held the lock, and a second client took the lock.
func TestLateReleaseOfAnEarlierAttemptCannotDeleteTheLock(t *testing.T) {
	ms, bs := minis(t, 3)
	slow1, d1 := lateNode(bs[1])
	slow2, d2 := lateNode(bs[2])
	slow := []*lateDelivery{d1, d2}
	nodes := []driver.Node{bs[0], slow1, slow2}
	var attempts atomic.Int32
	var heal sync.Once
	observe := redlock.Observer(func(e redlock.Event) {
		switch e.Kind {
		case redlock.EventContention: // attempt 1 failed and was rolled back: the network heals
			heal.Do(func() {
				for _, s := range slow {
					s.onTime()
				}
			})
		case redlock.EventAcquire:
			attempts.Store(int32(e.Attempt))
		}
	})
	r, err := redlock.New(nodes, redlock.WithStrategy(redlock.Retry(1, time.Millisecond)), redlock.WithHandoff(false),
		redlock.WithTTL(time.Minute), redlock.WithObserver(observe))
	require.NoError(t, err)
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.EqualValues(t, 2, attempts.Load(), "granted on the second attempt")
	require.Equal(t, 3, holdersOf(t, ms, "k", l.Token()))

	for _, s := range slow {
		s.deliver() // attempt 1's SET, then its rollback's release
	}
	assert.GreaterOrEqual(t, holdersOf(t, ms, "k", l.Token()), redlock.Quorum(3),
		"a quorum of nodes still holds the lock's token while it is valid")
	other, err := redlock.New(bs, redlock.WithStrategy(redlock.Reject()), redlock.WithHandoff(false))
	require.NoError(t, err)
	_, err = other.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "nobody else can take a valid lock")
	require.NoError(t, l.Unlock(t.Context()))
}

// replyLoser is a go-redis Dialer whose connections can lose one reply:
// after arm, the next reply read is thrown away once it has arrived (so
// the command ran) and the connection breaks, as when a network loses the
// reply and then the connection.
type replyLoser struct{ armed atomic.Bool }

func (d *replyLoser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, d: d}, nil
}

type losingConn struct {
	net.Conn
	d *replyLoser
}

func (c *losingConn) Read(p []byte) (int, error) {
	if !c.d.armed.CompareAndSwap(true, false) {
		return c.Conn.Read(p)
	}
	_, _ = c.Conn.Read(p) // the reply arrived: the command ran
	_ = c.Conn.Close()
	return 0, io.ErrUnexpectedEOF
}

// losingClient is a go-redis client with the library's default retries
// (MaxRetries 0 means 3) whose replies can be lost.
func losingClient(t *testing.T, addr string) (*redis.Client, *replyLoser) {
	d := &replyLoser{}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, Dialer: d.dial, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Ping(t.Context()).Err(), "warm the pool up before losing replies")
	return c, d
}

// TestResentCommandsCannotLie is finding 2. go-redis resends a command
// whose connection broke. A SET NX that ran but whose reply was lost came
// back as "held by someone else" and our own key stayed, blocking everyone
// for the TTL; a release that ran but whose reply was lost came back as
// "not ours", and Unlock reported ErrNotHeld (Do: ErrLockLost) although
// the lock was released.
func TestResentCommandsCannotLie(t *testing.T) {
	t.Run("acquire", func(t *testing.T) {
		m := miniredis.RunT(t)
		c, loser := losingClient(t, m.Addr())
		s, err := redlock.NewSingle(node(t, c), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		loser.armed.Store(true)
		_, err = s.Lock(t.Context(), "k")
		require.Error(t, err, "the reply was lost")
		assert.False(t, m.Exists("k"), "the key we may have set is rolled back, not left to block everyone")

		l, err := s.Lock(t.Context(), "k")
		require.NoError(t, err, "the key is free again")
		require.NoError(t, l.Unlock(t.Context()))
	})
	t.Run("release", func(t *testing.T) {
		m := miniredis.RunT(t)
		c, loser := losingClient(t, m.Addr())
		s, err := redlock.NewSingle(node(t, c), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		l, err := s.Lock(t.Context(), "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()), "the node has the release script now")
		l, err = s.Lock(t.Context(), "k")
		require.NoError(t, err)
		loser.armed.Store(true)
		err = l.Unlock(t.Context())
		assert.False(t, m.Exists("k"), "the release ran")
		assert.NotErrorIs(t, err, redlock.ErrNotHeld, "a lost reply is not a lost lock")
		assert.ErrorIs(t, err, redlock.ErrUnavailable, "the node's answer is unknown")
	})
	t.Run("Do", func(t *testing.T) {
		m := miniredis.RunT(t)
		c, loser := losingClient(t, m.Addr())
		s, err := redlock.NewSingle(node(t, c), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		require.NoError(t, s.Do(t.Context(), "k", func(context.Context) error { return nil }),
			"the node has the release script now")
		err = s.Do(t.Context(), "k", func(context.Context) error {
			loser.armed.Store(true) // the release's reply is lost
			return nil
		})
		assert.NoError(t, err, "the release ran; nothing was lost")
		assert.False(t, m.Exists("k"))
	})
}

// TestQueuedWaiterAttemptsOnItsOwnDelays is finding 5. A second Lock call
// of a process queues behind the first waiter. When the holder crashed
// (its key expires, which announces nothing), the queued call used to let
// its delays pass without attempting and fail with ErrTimeout "after 0
// attempts" on a key that existed nowhere.
func TestQueuedWaiterAttemptsOnItsOwnDelays(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0])
	require.NoError(t, err)
	_, err = s.Lock(t.Context(), "k") // the holder, which will crash
	require.NoError(t, err)

	first, stopFirst := context.WithCancel(t.Context())
	firstDone := make(chan error, 1)
	var refusals atomic.Int32
	countRefusals := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			refusals.Add(1)
		}
	})
	go func() {
		l, err := s.Lock(first, "k", redlock.WithStrategy(redlock.Retry(10, time.Hour)), redlock.WithObserver(countRefusals))
		if err == nil { // handed over by the Unlock below (handoff.go)
			err = l.Unlock(t.Context())
		}
		firstDone <- err
	}()
	// The first waiter is in line and has made its attempts: the first,
	// and the one right after subscribing; its next comes in an hour.
	testwait.Until(t, `redlock.InLine(s, "k") == 1 && refusals.Load() == 2`, func() bool { return redlock.InLine(s, "k") == 1 && refusals.Load() == 2 })

	ms[0].Del("k") // the holder's key expires: nothing is announced
	l, err := s.Lock(t.Context(), "k", redlock.WithStrategy(redlock.Retry(3, 5*time.Millisecond)))
	require.NoError(t, err, "the queued waiter attempts when its delay runs out, and finds the key free")
	require.NoError(t, l.Unlock(t.Context()))
	stopFirst()
	// The Unlock handed the key to the first waiter, or it was cancelled
	// first.
	if err := <-firstDone; err != nil {
		assert.ErrorIs(t, err, context.Canceled)
	}
	assert.False(t, ms[0].Exists("k"), "nothing left behind")
}

// hybridClock reads time from a fake clock, which the nodes move, and
// waits on real timers, so that announcements race the delays for real.
type hybridClock struct{ *fakeClock }

func (hybridClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestOwnRollbackDoesNotWakeTheCaller is finding 9. Every round ends with
// no validity left (the three nodes answer after 33 ms each on the clock,
// TTL 100 ms), so every attempt is rolled back, and each rollback's release
// announcement woke the caller that made it: it attempted again at once,
// 21 times instead of 4 under Retry(3, 100ms).
func TestOwnRollbackDoesNotWakeTheCaller(t *testing.T) {
	for _, handoff := range []bool{false, true} {
		t.Run(map[bool]string{false: "handoff off", true: "handoff on"}[handoff], func(t *testing.T) {
			_, bs := minis(t, 3)
			clk := hybridClock{newFakeClock()}
			nodes := make([]driver.Node, len(bs))
			for i, b := range bs {
				n := fakenode.Wrap(b) // keeps Notifier: releases are announced
				n.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
					if c.Op == fakenode.Acquire {
						clk.Advance(33 * time.Millisecond)
					}
					return c.Send(ctx)
				})
				nodes[i] = n
			}
			var attempts atomic.Int64
			count := redlock.Observer(func(e redlock.Event) {
				if e.Kind == redlock.EventAcquire {
					attempts.Store(int64(e.Attempt))
				}
			})
			r, err := redlock.New(nodes, redlock.WithTTL(100*time.Millisecond), redlock.WithNodeTimeout(50*time.Millisecond),
				redlock.WithClock(clk), redlock.WithStrategy(redlock.Retry(3, 20*time.Millisecond)), redlock.WithHandoff(handoff), redlock.WithObserver(count))
			require.NoError(t, err)
			_, err = r.Lock(t.Context(), "k")
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			// The first attempt and one per retry; with hand-off the
			// attempt right after subscribing is one of them.
			assert.EqualValues(t, 4, attempts.Load(), "attempts")
		})
	}
}

// TestReleaseWithoutPublish is finding 8 on miniredis: with hand-off off
// the release script does not publish at all.
func TestReleaseWithoutPublish(t *testing.T) {
	m, bs := minis(t, 1)
	ps := redistest.Client(t, m[0].Addr()).Subscribe(t.Context(), redlock.ReleaseChannel("k"))
	defer ps.Close()
	_, err := ps.Receive(t.Context()) // the subscription is active
	require.NoError(t, err)

	s, err := redlock.NewSingle(bs[0], redlock.WithHandoff(false))
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	l, err = s.Lock(t.Context(), "k", redlock.WithHandoff(true))
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	msg, err := ps.ReceiveMessage(t.Context())
	require.NoError(t, err)
	assert.Equal(t, l.Token(), msg.Payload, "only the release with hand-off on announced, with its token")
}

// TestBadTimingsAreRefused is finding 10: a drift allowance that overflowed
// into a negative duration, and TTLs and renew intervals that leave no
// room for a node call.
func TestBadTimingsAreRefused(t *testing.T) {
	_, bs := minis(t, 1)
	nearOne := math.Nextafter(1, 0)
	_, err := redlock.NewSingle(bs[0], redlock.WithTTL(math.MaxInt64), redlock.WithDriftFactor(nearOne))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "the drift allowance does not wrap around to a negative duration")
	assert.Equal(t, time.Duration(math.MaxInt64), redlock.DriftFor(math.MaxInt64, nearOne), "it saturates")

	_, err = redlock.NewSingle(bs[0], redlock.WithTTL(time.Second), redlock.WithNodeTimeout(995*time.Millisecond))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "TTL 1 s minus 12 ms of drift leaves no room for a 995 ms node call")
	_, err = redlock.NewSingle(bs[0], redlock.WithTTL(time.Second), redlock.WithRenewEvery(900*time.Millisecond))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "900 ms plus the 100 ms node timeout do not fit in 988 ms")

	s, err := redlock.NewSingle(bs[0], redlock.WithTTL(10*time.Second)) // node timeout 1 s
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	assert.ErrorIs(t, l.Extend(t.Context(), time.Second), redlock.ErrInvalid, "an extension to 1 s cannot outlast a 1 s node call")
	require.NoError(t, l.Extend(t.Context(), 2*time.Second))
	require.NoError(t, l.Unlock(t.Context()))
}

// TestCancelledLockSendsNothing is finding 10: a Lock whose context was
// already cancelled sent a rollback to every node.
func TestCancelledLockSendsNothing(t *testing.T) {
	ms, bs := minis(t, 3)
	r, err := redlock.New(bs)
	require.NoError(t, err)
	before := 0
	for _, m := range ms {
		before += m.CommandCount()
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = r.Lock(ctx, "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	after := 0
	for _, m := range ms {
		after += m.CommandCount()
	}
	assert.Equal(t, before, after, "no command reached any node")
}

// TestRealServerReleaseWherePublishIsDenied is finding 8: on a server whose
// ACL denies PUBLISH, release.lua deleted the key and then failed, so
// every Unlock reported ErrUnavailable although it had released.
func TestRealServerReleaseWherePublishIsDenied(t *testing.T) {
	c := redistest.Start(t, 1)
	addr := c.Addrs()[0]
	require.NoError(t, redistest.Client(t, addr).Do(t.Context(),
		"acl", "setuser", "locker", "on", ">secret", "~*", "&*", "+@all", "-publish").Err())
	restricted := redis.NewClient(&redis.Options{Addr: addr, Username: "locker", Password: "secret",
		ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { restricted.Close() })
	require.Error(t, restricted.Publish(t.Context(), "x", "").Err(), "the ACL denies PUBLISH")

	for _, handoff := range []bool{false, true} {
		s, err := redlock.NewSingle(node(t, restricted), redlock.WithHandoff(handoff))
		require.NoError(t, err)
		l, err := s.Lock(t.Context(), "k")
		require.NoError(t, err)
		assert.NoError(t, l.Unlock(t.Context()), "hand-off %v: the release is not failed by its announcement", handoff)
		assert.Zero(t, redistest.Client(t, addr).Exists(t.Context(), "k").Val(), "hand-off %v: released", handoff)
	}
}

// TestUnansweredReleaseIsNotALostLock was found by the network nemesis: a
// lock granted by nodes 0-3 of 5 (node 4 held someone else's key) whose
// release reached only nodes 2-4 got two "deleted" and one "not ours"
// (from node 4, which never had it), and Unlock counted three answers, a
// quorum, and said ErrNotHeld: Do reported a lost lock. Nodes 0 and 1 may
// still hold our token; the truth is "unknown".
func TestUnansweredReleaseIsNotALostLock(t *testing.T) {
	ms, bs := minis(t, 5)
	nodes, fs := flakies(bs)
	r, err := redlock.New(nodes, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	require.NoError(t, ms[4].Set("k", "someone else"))
	err = r.Do(t.Context(), "k", func(context.Context) error {
		setFaults(fs, down, down)
		return nil
	})
	assert.NoError(t, err, "nothing shows the lock was lost")

	// Nodes 0 and 1 still hold that lock's key until its TTL: use another.
	setFaults(fs)
	require.NoError(t, ms[4].Set("k2", "someone else"))
	l, err := r.Lock(t.Context(), "k2")
	require.NoError(t, err)
	setFaults(fs, down, down)
	err = l.Unlock(t.Context())
	assert.ErrorIs(t, err, redlock.ErrUnavailable)
	assert.NotErrorIs(t, err, redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Extend(t.Context(), redlock.DefaultTTL), redlock.ErrNotHeld, "after Unlock")

	// With three "not ours", the lock is certainly not held on a quorum.
	setFaults(fs)
	l, err = r.Lock(t.Context(), "k3")
	require.NoError(t, err)
	for _, m := range ms[1:4] {
		m.Del("k3") // expired on three nodes
	}
	setFaults(fs, down)
	assert.ErrorIs(t, l.Extend(t.Context(), redlock.DefaultTTL), redlock.ErrNotHeld)
	assert.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld)
}
