package goredis

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const watchdog = testwait.Watchdog

// client returns a go-redis client for addr that honours context deadlines
// and never retries, closed when the test ends.
func client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
		MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// adapt is New for a client the test knows to be valid, as the concrete
// type, for tests that look inside the adapter.
func adapt(t testing.TB, c redis.UniversalClient) *node {
	t.Helper()
	b, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return b.(*node)
}
