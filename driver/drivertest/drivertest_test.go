package drivertest_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/driver/drivertest"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func node(t *testing.T, addr string) *goredis.Node {
	n, err := goredis.New(redistest.Client(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// The go-redis adapter over miniredis, whose clock moves only when told.
func TestGoRedisMiniredis(t *testing.T) {
	srv := miniredis.RunT(t)
	drivertest.Run(t, func(t *testing.T) drivertest.Target {
		return drivertest.Target{Node: node(t, srv.Addr()), Elapse: srv.FastForward}
	})
}

// The go-redis adapter over three redis-servers, paused to stall.
func TestGoRedisServers(t *testing.T) {
	c := redistest.Start(t, 3)
	i := 0
	drivertest.Run(t, func(t *testing.T) drivertest.Target {
		s := c.Servers[i%3]
		i++
		return drivertest.Target{Node: node(t, s.Addr()), Stall: func() func() {
			if err := s.Pause(); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := s.Resume(); err != nil {
					t.Fatal(err)
				}
			}
		}}
	})
}

// A new primitive needs no adapter change: a script of the caller's own
// that counts an event only while the caller holds a lock runs through
// the adapter's Eval like the core's own scripts.
func TestNewPrimitiveNeedsNoAdapterChange(t *testing.T) {
	srv := miniredis.RunT(t)
	n := node(t, srv.Addr())
	l, err := redlock.NewSingle(n)
	if err != nil {
		t.Fatal(err)
	}
	countWhileHeld := driver.NewScript("count_while_held", `
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return -1
end
return redis.call("incr", KEYS[2])`)
	count := func(token string) any {
		r, err := n.Eval(context.Background(), countWhileHeld, []string{"job", "job:count"}, token)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	lock, err := l.Lock(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if got := count(lock.Token()); got != int64(1) {
		t.Errorf("counted while held: %#v, want 1", got)
	}
	if err := lock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := count(lock.Token()); got != int64(-1) {
		t.Errorf("counted after release: %#v, want -1 (refused)", got)
	}
}
