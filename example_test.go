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

// The README's quick start, as written: five independent masters, one lock.
func Example() {
	ctx := context.Background()
	var nodes []driver.Node
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004", "127.0.0.1:7005"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
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

	lock, err := locker.Lock(ctx, "order:1234")
	switch {
	case errors.Is(err, redlock.ErrNotAcquired):
		log.Print("order 1234 is being processed elsewhere") // HTTP 409
		return
	case err != nil:
		log.Fatal(err) // ErrUnavailable: too few masters answered (HTTP 500)
	}
	defer lock.Unlock(ctx)

	// ... charge the order; finish before lock.Until() ...
}

func ExampleNewSingle() {
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
	locker, err := redlock.NewSingle(node, redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, err := locker.Lock(ctx, "supplier:abc")
	fmt.Println("first:", err)
	_, err = locker.Lock(ctx, "supplier:abc")
	fmt.Println("second:", errors.Is(err, redlock.ErrNotAcquired))
	_, err = locker.Lock(ctx, "supplier:xyz")
	fmt.Println("other record:", err)
	fmt.Println("unlock:", first.Unlock(ctx))
	// Output:
	// first: <nil>
	// second: true
	// other record: <nil>
	// unlock: <nil>
}
