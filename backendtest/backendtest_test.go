package backendtest_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/backendtest"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
)

// TestMain checks that no goroutine outlives the tests: not the suite's,
// not the adapter's once its clients are closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newBackend is the correct adapter the broken ones wrap: go-redis.
func newBackend(c *redis.Client) redlock.Backend {
	b, err := goredis.New(c)
	if err != nil {
		panic(err) // the clients of these tests are built valid
	}
	return b
}

// miniTarget is a fresh miniredis behind a fault proxy: its clock moves
// only by Elapse, and Stall holds the proxy's traffic.
type miniTarget struct {
	m *miniredis.Miniredis
	p *faultproxy.Proxy
	c *redis.Client
}

func openMini(t *testing.T) miniTarget {
	m := miniredis.RunT(t)
	p, err := faultproxy.New(m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return miniTarget{m: m, p: p, c: redistest.Client(t, p.Addr())}
}

func (mt miniTarget) target(b redlock.Backend) backendtest.Target {
	return backendtest.Target{
		Backend: b,
		Elapse:  mt.m.FastForward,
		Stall: func() func() {
			mt.p.Set(faultproxy.Fault{Kind: faultproxy.Stall})
			return func() { mt.p.Set(faultproxy.Fault{Kind: faultproxy.Pass}) }
		},
	}
}
