package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

// Readers of a report share its key; a writer waits for them, and while
// it waits new readers wait behind it.
func ExampleRedlock_DoRead() {
	srv := miniredis.NewMiniRedis() // stands in for a real Redis master
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	node, err := goredis.New(c)
	if err != nil {
		log.Fatal(err)
	}
	locker, err := redlock.NewSingle(node, redlock.WithFencing(),
		redlock.WithTTL(10*time.Second), redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	w, err := locker.WLock(ctx, "report:42")
	if err != nil {
		log.Fatal(err)
	}
	_ = w.Unlock(ctx)

	err = locker.DoRead(ctx, "report:42", func(ctx context.Context) error {
		l, _ := redlock.FromContext(ctx)
		fmt.Println("reading, the latest writer's token:", l.Fence() == w.Fence())
		other, err := locker.RLock(ctx, "report:42")
		fmt.Println("a second reader at once:", err == nil)
		_, err2 := locker.WLock(ctx, "report:42")
		fmt.Println("a writer meanwhile:", errors.Is(err2, redlock.ErrNotAcquired))
		return other.Unlock(ctx)
	})
	fmt.Println("done:", err)
	// Output:
	// reading, the latest writer's token: true
	// a second reader at once: true
	// a writer meanwhile: true
	// done: <nil>
}
