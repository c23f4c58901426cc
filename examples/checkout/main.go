// Command checkout is the seed article's checkout endpoint as a Go
// service: one order is never charged twice at once, however many
// workers run it, because each checkout holds the order's lock.
//
//	POST /orders/{id}/checkout  {"amount": 1500}
//	    200 {"status":"success",...}       charged
//	    200 {"status":"already_paid",...}  charged earlier; nothing done
//	    409 {"error":"..."}                another checkout of this order is running
//	    500 {"error":"..."}                the lock service could not decide
//	GET  /orders/{id}
//
// The locker comes from the LOCK_DISTRIBUTED_* variables, read from the
// environment and from the .env file named by -env (skipped if it does not
// exist; the environment wins). With LOCK_DISTRIBUTED_ENABLED unset the
// service runs without Redis and without mutual exclusion.
//
//	LOCK_DISTRIBUTED_ENABLED=true LOCK_DISTRIBUTED_STRATEGY=reject \
//	LOCK_DISTRIBUTED_NODES=redis://127.0.0.1:6379 go run .   # in examples/checkout, a module of its own
//
// Flags: -addr (default $CHECKOUT_ADDR, else 127.0.0.1:8080) and -env
// (default .env).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/envconfig"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends, then shuts down gracefully. ready, when not
// nil, is called with the listening address once requests can be sent.
func run(ctx context.Context, args []string, logw io.Writer, ready func(addr string)) error {
	flags := flag.NewFlagSet("checkout", flag.ContinueOnError)
	flags.SetOutput(logw)
	addr := flags.String("addr", envOr("CHECKOUT_ADDR", "127.0.0.1:8080"), "listen address")
	envFile := flags.String("env", ".env", "a .env file with LOCK_DISTRIBUTED_* variables, skipped if missing; the environment wins over it")
	if err := flags.Parse(args); err != nil {
		return err
	}
	logger := log.New(logw, "checkout: ", log.LstdFlags)

	var files []string
	if *envFile != "" {
		switch _, err := os.Stat(*envFile); {
		case err == nil:
			files = append(files, *envFile)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
	}
	lookup, err := envconfig.Lookup(files...)
	if err != nil {
		return err
	}
	cfg, err := envconfig.Load(lookup)
	if err != nil {
		return err
	}
	locker, closer, err := cfg.Open()
	if err != nil {
		return err
	}
	defer closer.Close()
	if cfg.Enabled {
		logger.Printf("distributed lock on %d node(s), strategy %s, TTL %v", len(cfg.Nodes), cfg.Strategy, cfg.TTL)
	} else {
		logger.Printf("distributed lock disabled (%s is not true): no mutual exclusion", envconfig.VarEnabled)
	}

	h, err := newHandler(locker, simulatedCharge)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Printf("listening on http://%s", ln.Addr())
	if ready != nil {
		ready(ln.Addr().String())
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown) // waits for checkouts in flight, which release their locks
	<-served
	return err
}

// simulatedCharge stands in for the payment gateway: half a second of
// I/O, as in the seed, cut short when the lock is lost.
func simulatedCharge(ctx context.Context, orderID string, amount int64) error {
	select {
	case <-time.After(500 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("charge for order %s abandoned: %w", orderID, context.Cause(ctx))
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
