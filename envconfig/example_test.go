package envconfig_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
)

// An application reads its locker from the environment (and optional .env
// files) once at start-up, and closes the Redis clients when it stops.
func ExampleOpen() {
	locker, clients, err := envconfig.Open() // or Open(".env"), Open("config/production.env")
	if err != nil {
		log.Fatal(err) // e.g. envconfig: invalid LOCK_DISTRIBUTED_TTL="ten": ...
	}
	defer clients.Close()
	log.Printf("locking: %v", clients) // says "disabled: every lock is granted without Redis" when it is
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := clients.Ping(ctx); err != nil { // a node that does not answer fails the start
		log.Fatal(err) // e.g. envconfig: node "redis://xxxxx@10.0.0.1:6379": connection refused: ...
	}

	lock, err := locker.Lock(ctx, "order:1234")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())
}

// Load takes any lookup function, so tests and tools never touch the
// process environment.
func ExampleLoad() {
	env := map[string]string{
		"LOCK_DISTRIBUTED_ENABLED":  "true",
		"LOCK_DISTRIBUTED_STRATEGY": "reject",
		"LOCK_DISTRIBUTED_TTL":      "30",
		"LOCK_DISTRIBUTED_NODES":    "redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003",
	}
	c, err := envconfig.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	fmt.Println(err)
	fmt.Println(c.Enabled, c.Strategy, c.TTL, c.Retries, c.RetryDelay, len(c.Nodes))

	env["LOCK_DISTRIBUTED_TTL"] = "10s"
	_, err = envconfig.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	var ee *envconfig.Error
	fmt.Println(errors.Is(err, redlock.ErrInvalid), errors.As(err, &ee) && ee.Var == envconfig.VarTTL)
	// Output:
	// <nil>
	// true reject 30s 3 100ms 3
	// true true
}

// Disabled (the default), the locker grants every lock without Redis, so
// the same code runs on a laptop; the Clients say so.
func ExampleConfig_Open_disabled() {
	c, _ := envconfig.Load(func(string) (string, bool) { return "", false })
	locker, clients, _ := c.Open()
	defer clients.Close()
	fmt.Println(clients.Disabled())
	fmt.Println(clients)
	ctx := context.Background()
	a, errA := locker.Lock(ctx, "supplier:abc")
	b, errB := locker.Lock(ctx, "supplier:abc")
	fmt.Println(errA, errB)
	fmt.Println(a.Unlock(ctx), b.Unlock(ctx))
	// Output:
	// true
	// disabled: every lock is granted without Redis; strategy retry, ttl 10s, retries 3, retry delay 100ms, client go-redis, nodes []
	// <nil> <nil>
	// <nil> <nil>
}

// Nodes without LOCK_DISTRIBUTED_ENABLED would lock nothing: Open refuses
// them and says which variable to set.
func ExampleConfig_Open_nodesWithoutEnabled() {
	env := map[string]string{"LOCK_DISTRIBUTED_NODES": "redis://10.0.0.1:6379"}
	c, _ := envconfig.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	_, _, err := c.Open()
	fmt.Println(err)
	// Output:
	// envconfig: invalid LOCK_DISTRIBUTED_NODES="redis://10.0.0.1:6379": LOCK_DISTRIBUTED_ENABLED is not set, so these nodes would lock nothing: set LOCK_DISTRIBUTED_ENABLED=true to lock through them, or LOCK_DISTRIBUTED_ENABLED=false to run without locking (every lock granted, no mutual exclusion)
}

// Errors and printed Configs are safe to log: the user info of every URL
// (passwords included) shows as xxxxx.
func ExampleError() {
	env := map[string]string{"LOCK_DISTRIBUTED_NODES": "redis://:s3cret@10.0.0.1:6379/db"}
	_, err := envconfig.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	fmt.Println(err)

	c := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyRetry, TTL: envconfig.DefaultTTL,
		Nodes: []string{"redis://app:s3cret@10.0.0.1:6379", "redis://10.0.0.2:6379"}, Client: envconfig.ClientGoRedis}
	fmt.Printf("%+v\n", c)
	// Output:
	// envconfig: invalid LOCK_DISTRIBUTED_NODES="redis://xxxxx@10.0.0.1:6379/db": "redis://xxxxx@10.0.0.1:6379/db": redis: invalid database number: "db"
	// {Enabled:true Strategy:retry TTL:10s Retries:0 RetryDelay:0s Nodes:[redis://xxxxx@10.0.0.1:6379 redis://10.0.0.2:6379] Client:go-redis}
}
