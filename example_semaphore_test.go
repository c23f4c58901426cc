package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

// At most two workers call the payment provider at once, over three
// masters. A permit is the lock of one of the semaphore's slots.
func ExampleSemaphore() {
	var nodes []driver.Node
	for range 3 {
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
		nodes = append(nodes, node)
	}
	locker, err := redlock.New(nodes, redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	sem, err := redlock.NewSemaphore(locker, "payments", 2, redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	a, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	b, err := sem.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two permits, two slots:", a.Slot() != b.Slot())
	_, err = sem.Acquire(ctx)
	fmt.Println("a third is refused:", errors.Is(err, redlock.ErrNotAcquired))

	if err := a.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	err = sem.Do(ctx, func(ctx context.Context) error {
		permit, _ := redlock.FromContext(ctx) // renewed while this runs
		fmt.Println("Do holds the slot A released:", permit.Slot() == a.Slot())
		return nil // ... call the provider; stop when ctx ends ...
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// two permits, two slots: true
	// a third is refused: true
	// Do holds the slot A released: true
}
