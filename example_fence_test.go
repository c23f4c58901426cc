package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

// FencedStore is the resource side of fencing: it remembers the highest
// token that has written each record and refuses a write carrying a lower
// one. The check and the write happen under one mutex here; in a database
// it is one conditional statement, e.g.
//
//	UPDATE orders SET ..., fence = $token WHERE id = $id AND fence <= $token
type FencedStore struct {
	mu      sync.Mutex
	highest map[string]int64
	values  map[string]string
}

var ErrStaleToken = errors.New("stale fencing token")

func (s *FencedStore) Write(record string, token int64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest[record] {
		return fmt.Errorf("%w: below the highest seen", ErrStaleToken)
	}
	if s.highest == nil {
		s.highest, s.values = map[string]int64{}, map[string]string{}
	}
	s.highest[record], s.values[record] = token, value
	return nil
}

// A holder that pauses past its validity (here: its key expires while it
// sleeps) writes after the next holder; the store refuses the stale write.
func ExampleWithFencing() {
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
		redlock.WithTTL(time.Second), redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	store := &FencedStore{}

	a, err := locker.Lock(ctx, "order:7")
	if err != nil {
		log.Fatal(err)
	}
	srv.FastForward(2 * time.Second) // A stalls (GC, swap) and its lock expires

	b, err := locker.Lock(ctx, "order:7")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B writes:", store.Write("order:7", b.Fence(), "paid by B"))
	fmt.Println("A wakes, writes:", store.Write("order:7", a.Fence(), "paid by A"))
	fmt.Println("B's token above A's:", b.Fence() > a.Fence())
	// Output:
	// B writes: <nil>
	// A wakes, writes: stale fencing token: below the highest seen
	// B's token above A's: true
}
