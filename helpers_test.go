package redlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// node adapts c with the go-redis adapter.
func node(t testing.TB, c redis.UniversalClient) driver.Node {
	t.Helper()
	b, err := goredis.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// minis starts n miniredis servers and returns them with a Backend each.
// miniredis never expires keys by itself: tests move its clock with
// FastForward, which makes expiry deterministic.
func minis(t testing.TB, n int) ([]*miniredis.Miniredis, []driver.Node) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	bs := make([]driver.Node, n)
	for i := range ms {
		ms[i] = miniredis.RunT(t)
		bs[i] = node(t, redistest.Client(t, ms[i].Addr()))
	}
	return ms, bs
}

// fakeClock is a Clock that moves only when told to, or by the delay
// asked of After, which it records and returns at once.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	delays  []time.Duration
	onAfter func(n int) // called with the count of After calls so far
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.delays = append(c.delays, d)
	n, hook, now := len(c.delays), c.onAfter, c.now
	c.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

func (c *fakeClock) Delays() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.delays...)
}

// manualClock is fakeClock whose After fires only when Advance moves
// the time past it; it records the delays asked of After (Delays).
type manualClock struct {
	fakeClock
	timers []manualTimer // guarded by fakeClock.mu
}

type manualTimer struct {
	at time.Time
	ch chan time.Time
}

func newManualClock() *manualClock {
	return &manualClock{fakeClock: fakeClock{now: newFakeClock().Now()}}
}

func (c *manualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delays = append(c.delays, d)
	t := manualTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers = append(c.timers, t)
	c.fireLocked()
	return t.ch
}

// Advance moves the time on by d and fires the timers due by then.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

func (c *manualClock) fireLocked() {
	c.timers = slices.DeleteFunc(c.timers, func(t manualTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		t.ch <- c.now
		return true
	})
}

// onAcquire wraps bs in fake nodes that hide Fencer and Notifier (plain
// Backends), and runs before, when set, ahead of every Acquire on node 0.
// It returns the lockers' nodes and the fakes, to count calls.
func onAcquire(bs []driver.Node, before func()) ([]driver.Node, []*fakenode.Node) {
	_, ns := fakenode.WrapAll(bs)
	out := make([]driver.Node, len(ns))
	for i, n := range ns {
		out[i] = fakenode.Silent(n)
	}
	if before != nil {
		ns[0].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
			if c.Op == fakenode.Acquire {
				before()
			}
			return c.Send(ctx)
		})
	}
	return out, ns
}
