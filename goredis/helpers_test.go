package goredis

import (
	"testing"

	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const watchdog = testwait.Watchdog

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
