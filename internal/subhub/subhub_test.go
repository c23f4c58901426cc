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
