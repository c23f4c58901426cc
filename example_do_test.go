package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

// masters starts n in-process stand-ins for independent Redis masters and
// returns a Backend for each, with a function that stops them.
func masters(n int) ([]driver.Node, func()) {
	var nodes []driver.Node
	var stops []func()
	for range n {
		srv := miniredis.NewMiniRedis()
		if err := srv.Start(); err != nil {
			log.Fatal(err)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		node, err := goredis.New(c)
		if err != nil {
			log.Fatal(err)
		}
		nodes = append(nodes, node)
		stops = append(stops, func() { c.Close(); srv.Close() })
	}
	return nodes, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// Do holds the lock for as long as the function runs, renewing it every
// TTL/3, and releases it however the function ends.
func ExampleRedlock_Do() {
	nodes, stop := masters(3)
	defer stop()
	// A short TTL to show renewal; the node timeout gives each extension
	// room on a loaded machine (the default would be TTL/10).
	locker, err := redlock.New(nodes, redlock.WithTTL(300*time.Millisecond),
		redlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}

	err = locker.Do(context.Background(), "order:1234", func(ctx context.Context) error {
		// Work that outlives the TTL several times over keeps the lock.
		select {
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			// The lock was lost (context.Cause(ctx) matches ErrLockLost)
			// or the caller gave up: stop writing.
			return context.Cause(ctx)
		}
	})
	switch {
	case errors.Is(err, redlock.ErrNotAcquired):
		fmt.Println("busy: someone else is processing order 1234") // HTTP 409
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock while working: do not trust the result")
	case err != nil:
		fmt.Println("failed:", err)
	default:
		fmt.Println("done")
	}
	// Output: done
}

// A lock held by hand can renew itself too; Lost tells the holder when
// it is gone.
func ExampleLock_Lost() {
	nodes, stop := masters(1)
	defer stop()
	locker, err := redlock.NewSingle(nodes[0], redlock.WithTTL(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.Lock(ctx, "report:daily", redlock.WithAutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(ctx) // also stops the heartbeat

	for batch := range 3 {
		select {
		case <-lock.Lost():
			fmt.Println("lock lost, stopping")
			return
		default:
		}
		fmt.Println("batch", batch)
	}
	// Output:
	// batch 0
	// batch 1
	// batch 2
}

// SlogObserver logs what the locks go through; nothing is logged without
// an observer.
func ExampleSlogObserver() {
	nodes, stop := masters(1)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { // drop the varying parts
			if a.Key == "time" || a.Key == "duration" || a.Key == "error" {
				return slog.Attr{}
			}
			return a
		},
	}))
	locker, err := redlock.NewSingle(nodes[0], redlock.WithStrategy(redlock.Reject()),
		redlock.WithObserver(redlock.SlogObserver(logger)))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.Lock(ctx, "supplier:abc") // Debug: not shown at Info
	if err != nil {
		log.Fatal(err)
	}
	_, _ = locker.Lock(ctx, "supplier:abc") // busy: Info
	_ = lock.Unlock(ctx)
	// Output:
	// level=INFO msg="redlock: acquire" key=supplier:abc attempt=1
}
