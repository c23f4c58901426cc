package subhub

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeConn is an adapter's side that counts its Close calls.
type fakeConn struct {
	closed atomic.Int32
	sub    *Sub
}

func (c *fakeConn) Close() {
	select {
	case <-c.sub.Closing:
	default:
		panic("Close before Closing was closed")
	}
	c.closed.Add(1)
}

type notified struct {
	stop func()
	err  error
}

// notifyAsync calls Notify on a goroutine and returns its result channel.
func notifyAsync(h *Hub, ctx context.Context, name string, released func(string), conn *fakeConn) chan notified {
	got := make(chan notified, 1)
	go func() {
		stop, err := h.Notify(ctx, []string{name}, released, func(s *Sub) Conn { conn.sub = s; return conn })
		got <- notified{stop, err}
	}()
	return got
}

// kicked waits for the writer's signal and returns the plan.
func kicked(t *testing.T, h *Hub) Plan {
	t.Helper()
	var s *Sub
	require.Eventually(t, func() bool { s = h.Current(); return s != nil }, 5*time.Second, time.Millisecond)
	select {
	case <-s.Kick:
	case <-time.After(5 * time.Second):
		t.Fatal("no kick")
	}
	h.Lock()
	defer h.Unlock()
	return s.PlanLocked()
}

func pending(t *testing.T, got chan notified) {
	t.Helper()
	select {
	case n := <-got:
		t.Fatalf("Notify returned before its channel was confirmed: %v", n.err)
	case <-time.After(20 * time.Millisecond):
	}
}

func locked(h *Hub, f func(s *Sub)) {
	h.Lock()
	defer h.Unlock()
	f(h.sub)
}

// TestLifecycle: a channel is active only once a PING planned after its
// SUBSCRIBE is answered; a lost connection resubscribes everything and
// tells the active channels' waiters ""; a failed round fails the Notify
// calls it was to confirm; the last stop closes the connection once.
func TestLifecycle(t *testing.T) {
	var h Hub
	conn := &fakeConn{}
	heard := make(chan string, 8)
	gotA := notifyAsync(&h, t.Context(), "a", func(p string) { heard <- p }, conn)

	p := kicked(t, &h)
	assert.Equal(t, Plan{Subscribe: []string{"a"}, Ping: 1}, p)
	locked(&h, func(s *Sub) { s.PongLocked(0) })
	pending(t, gotA)
	locked(&h, func(s *Sub) { s.PongLocked(1) })
	a := <-gotA
	require.NoError(t, a.err)
	locked(&h, func(s *Sub) { s.DispatchLocked("a", "tok"); s.DispatchLocked("b", "other") })
	assert.Equal(t, "tok", <-heard)

	// The connection is replaced: everything anew, then "" once answered.
	locked(&h, func(s *Sub) {
		s.LostLocked()
		p = s.PlanLocked()
	})
	assert.Equal(t, Plan{Subscribe: []string{"a"}, Ping: 2}, p)
	assert.Empty(t, heard)
	locked(&h, func(s *Sub) { s.PongLocked(2) })
	assert.Equal(t, "", <-heard, "a release may have been missed")

	// A failed round fails the channel it was to confirm.
	gotB := notifyAsync(&h, t.Context(), "b", func(string) {}, conn)
	p = kicked(t, &h)
	assert.Equal(t, Plan{Subscribe: []string{"b"}, Ping: 3}, p)
	boom := errors.New("boom")
	locked(&h, func(s *Sub) { s.FailedLocked(p, boom) })
	assert.ErrorIs(t, (<-gotB).err, boom)
	locked(&h, func(s *Sub) { p = s.PlanLocked() })
	assert.Equal(t, []string{"b"}, p.Unsubscribe, "nobody waits for b: unsubscribed")
	assert.NotZero(t, p.Ping, "a resynchronisation follows a failed round")

	a.stop()
	a.stop() // idempotent
	assert.Nil(t, h.Current())
	assert.Equal(t, int32(1), conn.closed.Load(), "the last stop closes the connection once")
}

// TestRefusedAndDropped: a refused SUBSCRIBE fails its waiters with the
// adapter's error and is unsubscribed once nobody waits; a sunsubscribe
// the hub did not ask for is told apart from its own.
func TestRefusedAndDropped(t *testing.T) {
	var h Hub
	conn := &fakeConn{}
	gotC := notifyAsync(&h, t.Context(), "c", func(string) {}, conn)
	p := kicked(t, &h)
	locked(&h, func(s *Sub) { s.PongLocked(p.Ping) })
	c := <-gotC
	require.NoError(t, c.err)

	gotA := notifyAsync(&h, t.Context(), "a", func(string) {}, conn)
	require.Equal(t, []string{"a"}, kicked(t, &h).Subscribe)
	refused := errors.New("NOPERM")
	locked(&h, func(s *Sub) {
		s.RefusedLocked(func(name string) error { return errors.Join(errors.New(name), refused) })
	})
	assert.ErrorIs(t, (<-gotA).err, refused)
	p = kicked(t, &h)
	assert.Equal(t, []string{"a"}, p.Unsubscribe, "the refused channel, on the client's list, is unsubscribed")
	assert.Empty(t, p.Subscribe)
	locked(&h, func(s *Sub) {
		assert.True(t, s.DroppedLocked("c"), "c has a waiter and is written: a sunsubscribe is the node's")
		assert.False(t, s.DroppedLocked("a"), "a is not written: the sunsubscribe is the hub's own")
	})

	ctx, cancel := context.WithCancel(t.Context())
	gotD := notifyAsync(&h, ctx, "d", func(string) {}, conn)
	assert.True(t, slices.Equal([]string{"d"}, kicked(t, &h).Subscribe))
	cancel()
	assert.ErrorIs(t, (<-gotD).err, context.Canceled, "a caller that gives up")
	c.stop()
	assert.Nil(t, h.Current())
	assert.Equal(t, int32(1), conn.closed.Load())
}

// TestSeveralChannels: a waiter on several channels costs one round: one
// plan subscribes them all and one PING confirms them; its stop leaves
// them all in one step, so a waiter that leaves while another stays
// plans one unsubscription of the channels only it had, and the last
// waiter's stop closes the connection without one. A channel that fails
// fails the whole call, which leaves the others.
func TestSeveralChannels(t *testing.T) {
	var h Hub
	conn := &fakeConn{}
	heard := make(chan string, 8)
	got := make(chan notified, 1)
	go func() {
		stop, err := h.Notify(t.Context(), []string{"a", "a:me"}, func(p string) { heard <- p },
			func(s *Sub) Conn { conn.sub = s; return conn })
		got <- notified{stop, err}
	}()
	p := kicked(t, &h)
	slices.Sort(p.Subscribe)
	assert.Equal(t, Plan{Subscribe: []string{"a", "a:me"}, Ping: 1}, p, "one round for both")
	pending(t, got)
	locked(&h, func(s *Sub) { s.PongLocked(1) })
	both := <-got
	require.NoError(t, both.err)
	locked(&h, func(s *Sub) { s.DispatchLocked("a", "released"); s.DispatchLocked("a:me", "granted") })
	assert.Equal(t, "released", <-heard)
	assert.Equal(t, "granted", <-heard)

	// A second waiter on "a" alone: nothing to write for it.
	one, err := h.Notify(t.Context(), []string{"a"}, func(string) {}, nil)
	require.NoError(t, err)
	// The first leaves: "a:me" alone is unsubscribed, in one plan.
	both.stop()
	p = kicked(t, &h)
	assert.Equal(t, Plan{Unsubscribe: []string{"a:me"}}, p)
	locked(&h, func(s *Sub) { s.DispatchLocked("a:me", "late") })
	assert.Empty(t, heard, "a stopped waiter hears nothing")
	one()
	assert.Nil(t, h.Current())
	assert.Equal(t, int32(1), conn.closed.Load())

	// One channel of two refused: the call fails, and leaves the other.
	conn2 := &fakeConn{}
	go func() {
		stop, err := h.Notify(t.Context(), []string{"b", "b:me"}, func(string) {},
			func(s *Sub) Conn { conn2.sub = s; return conn2 })
		got <- notified{stop, err}
	}()
	p = kicked(t, &h)
	boom := errors.New("refused")
	locked(&h, func(s *Sub) { s.RefusedLocked(func(string) error { return boom }) })
	failed := <-got
	assert.ErrorIs(t, failed.err, boom)
	assert.Nil(t, failed.stop)
	assert.Nil(t, h.Current(), "the failed call left every channel: the Sub closed")
	assert.Equal(t, int32(1), conn2.closed.Load())
}

// subscribed notifies name on h and confirms its subscription as the
// adapter's writer and receiver would (plan, then pong).
func subscribed(t *testing.T, h *Hub, name string, released func(string), conn *fakeConn) func() {
	t.Helper()
	got := notifyAsync(h, t.Context(), name, released, conn)
	p := kicked(t, h)
	require.Equal(t, []string{name}, p.Subscribe)
	locked(h, func(s *Sub) { s.PongLocked(p.Ping) })
	n := <-got
	require.NoError(t, n.err)
	return n.stop
}

// TestLingerKeepsTheSubForTheNextWaiter: with Linger, the last waiter's
// stop leaves the Sub running, still subscribed to its channel; a waiter
// of that channel meanwhile is subscribed at once (nothing to write), a
// waiter of another channel has the writer swap them; what is published
// while nobody waits reaches nobody; the Sub closes once Linger passes
// with nobody waiting, and Close ends a lingering Sub at once.
func TestLingerKeepsTheSubForTheNextWaiter(t *testing.T) {
	h := Hub{Linger: time.Hour}
	conn := &fakeConn{}
	heard := make(chan string, 8)
	stop := subscribed(t, &h, "a", func(p string) { heard <- p }, conn)
	s := h.Current()
	stop()
	require.Same(t, s, h.Current(), "the Sub lingers")
	assert.Zero(t, conn.closed.Load())
	select {
	case <-s.Kick:
		t.Fatal("nothing to write: the channel stays subscribed")
	default:
	}
	locked(&h, func(s *Sub) { s.DispatchLocked("a", "nobody waits") })
	assert.Empty(t, heard)

	// Subscribed at once: Notify returns with nothing written.
	stop, err := h.Notify(t.Context(), []string{"a"}, func(p string) { heard <- p }, func(*Sub) Conn {
		t.Fatal("a lingering Sub is joined, not started anew")
		return nil
	})
	require.NoError(t, err)
	locked(&h, func(s *Sub) {
		assert.True(t, s.PlanLocked().Empty())
		s.DispatchLocked("a", "tok")
	})
	assert.Equal(t, "tok", <-heard)
	stop()

	// Another channel: the one kept is unsubscribed when the Sub
	// lingers again, keeping the new one.
	stopB := subscribed(t, &h, "b", func(string) {}, conn)
	stopB()
	require.Same(t, s, h.Current())
	locked(&h, func(s *Sub) { assert.Equal(t, Plan{Unsubscribe: []string{"a"}}, s.PlanLocked()) })

	h.Close()
	assert.Nil(t, h.Current())
	assert.Equal(t, int32(1), conn.closed.Load(), "Close ends the lingering Sub once")
	h.Close()
	assert.Equal(t, int32(1), conn.closed.Load())

	// After Close nothing lingers: the last stop closes.
	conn2 := &fakeConn{}
	stop = subscribed(t, &h, "a", func(string) {}, conn2)
	stop()
	assert.Nil(t, h.Current())
	assert.Equal(t, int32(1), conn2.closed.Load())
}

// TestLingerExpires: a Sub nobody joins closes once Linger passed; one
// joined meanwhile does not, and lingers again after its new last waiter.
func TestLingerExpires(t *testing.T) {
	h := Hub{Linger: 20 * time.Millisecond}
	conn := &fakeConn{}
	stop := subscribed(t, &h, "a", func(string) {}, conn)
	s := h.Current()
	stop()
	stop, err := h.Notify(t.Context(), []string{"a"}, func(string) {}, func(*Sub) Conn {
		t.Fatal("a lingering Sub is joined")
		return nil
	})
	require.NoError(t, err)
	time.Sleep(40 * time.Millisecond) // Linger passes with a waiter: nothing closes
	require.Same(t, s, h.Current())
	assert.Zero(t, conn.closed.Load())
	stop()
	require.Eventually(t, func() bool { return conn.closed.Load() == 1 }, 5*time.Second, time.Millisecond)
	assert.Nil(t, h.Current())
}

// TestLingerKeepsFewChannels: a last waiter of more than maxLingering
// channels leaves none subscribed; unconfirmed channels are not kept.
func TestLingerKeepsFewChannels(t *testing.T) {
	h := Hub{Linger: time.Hour}
	defer h.Close()
	conn := &fakeConn{}
	names := []string{"a", "b", "c", "d", "e"}
	got := make(chan notified, 1)
	go func() {
		stop, err := h.Notify(t.Context(), names, func(string) {}, func(s *Sub) Conn { conn.sub = s; return conn })
		got <- notified{stop, err}
	}()
	p := kicked(t, &h)
	locked(&h, func(s *Sub) { s.PongLocked(p.Ping) })
	n := <-got
	require.NoError(t, n.err)
	n.stop()
	p = kicked(t, &h) // the writer is woken to unsubscribe them
	slices.Sort(p.Unsubscribe)
	assert.Equal(t, names, p.Unsubscribe)

	// A channel whose SUBSCRIBE is not confirmed is not kept either.
	ctx, cancel := context.WithCancel(t.Context())
	gotF := notifyAsync(&h, ctx, "f", func(string) {}, conn)
	p = kicked(t, &h)
	require.Equal(t, []string{"f"}, p.Subscribe)
	cancel()
	require.ErrorIs(t, (<-gotF).err, context.Canceled)
	assert.Equal(t, []string{"f"}, kicked(t, &h).Unsubscribe)
}
