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

// A transfer locks both accounts at once: the set is taken all or
// nothing, in one order whatever order the caller names the keys in, so
// two opposite transfers never deadlock; a single-key lock on either
// account waits for the set.
func ExampleRedlock_DoMany() {
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

	err = locker.DoMany(ctx, []string{"account:{bank}:9", "account:{bank}:2"}, func(ctx context.Context) error {
		l, _ := redlock.FromContext(ctx)
		fmt.Println("holding", l.Keys(), "with", len(l.Fences()), "fencing tokens")
		_, err := locker.Lock(ctx, "account:{bank}:2")
		fmt.Println("a single lock on one of them:", errors.Is(err, redlock.ErrNotAcquired))
		return nil // debit one, credit the other, each write carrying its fence
	})
	fmt.Println("done:", err)
	// Output:
	// holding [account:{bank}:2 account:{bank}:9] with 2 fencing tokens
	// a single lock on one of them: true
	// done: <nil>
}
