package redlock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

// Two instances campaign for one election; the first leads, the second
// waits and takes over the moment the first resigns, with a higher term.
// An observer sees each change.
func ExampleElection() {
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
	locker, err := redlock.NewSingle(node)
	if err != nil {
		log.Fatal(err)
	}
	election, err := redlock.NewElection(locker, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	changes, err := election.Observe(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("observed: %+v\n", <-changes) // nobody leads yet: no value, term 0

	a, err := election.Campaign(ctx, "host-a")
	if err != nil {
		log.Fatal(err)
	}
	first := <-changes
	fmt.Println("observed:", first.Value)

	won := make(chan *redlock.Leadership)
	go func() {
		b, err := election.Campaign(ctx, "host-b") // waits while host-a leads
		if err != nil {
			log.Fatal(err)
		}
		won <- b
	}()
	// host-a does its work under a.Context(), sending a.Term() with its
	// writes, until it resigns (or loses its lease: a.Lost()).
	if err := a.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	b := <-won
	fmt.Println("host-b leads, with a greater term:", b.Term() > a.Term())
	for l := range changes {
		if l.Value == "host-b" {
			fmt.Println("observed:", l.Value, l.Term == b.Term())
			break
		}
	}
	if err := b.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// observed: {Value: Term:0}
	// observed: host-a
	// host-b leads, with a greater term: true
	// observed: host-b true
}
