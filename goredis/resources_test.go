package goredis

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The quick start's cleanup (node.Close, then the client's Close) leaves
// no connection open on the server, after every primitive was used and a
// waiter subscribed to a release: CLIENT LIST shows only the test's own.
func TestQuickStartCleanupLeavesNoConnection(t *testing.T) {
	addr := redistest.Start(t, 1).Addrs()[0]
	admin := redistest.Client(t, addr)
	ctx := context.Background()

	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	node, err := New(c)
	require.NoError(t, err)
	locker, err := redlock.NewSingle(node, redlock.WithTTL(2*time.Second))
	require.NoError(t, err)

	require.NoError(t, locker.Do(ctx, "order:1", func(context.Context) error { return nil }))
	many, err := locker.LockMany(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.NoError(t, many.Unlock(ctx))
	read, err := locker.RLock(ctx, "doc")
	require.NoError(t, err)
	require.NoError(t, read.Unlock(ctx))

	// A waiter that subscribes to the release of a held lock.
	held, err := locker.Lock(ctx, "order:2")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		lock, err := locker.Lock(ctx, "order:2", redlock.WithStrategy(redlock.Retry(10, 200*time.Millisecond)))
		if err == nil {
			err = lock.Unlock(ctx)
		}
		got <- err
	}()
	testwait.Until(t, "the waiter subscribed", func() bool {
		n, err := admin.PubSubNumSub(ctx, "redlock:released:order:2").Result()
		return err == nil && n["redlock:released:order:2"] > 0
	})
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, testwait.Next(t, got))
	require.NotEmpty(t, redistest.OtherClients(t, admin), "the node had connections open")

	require.NoError(t, node.Close())
	require.NoError(t, c.Close())
	testwait.Until(t, "no connection left after Close", func() bool {
		return len(redistest.OtherClients(t, admin)) == 0
	})
	// Unreachable, c would be collected and its sockets closed by the
	// runtime, and the test would pass without the Close it checks.
	runtime.KeepAlive(c)
}
