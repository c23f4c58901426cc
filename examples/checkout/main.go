// Command checkout is the seed article's checkout endpoint as a Go
// service: one order is never charged twice, however many instances of
// the service run against one database, because each checkout holds the
// order's lock and every write it makes carries the lock's fencing token.
//
//	POST /orders/{id}/checkout  {"amount": 1500}
//	    200 {"status":"success",...}       charged
//	    200 {"status":"already_paid",...}  charged earlier; nothing done
//	    409 {"error":"..."}                another checkout of this order is running
//	    409 {"status":"stale",...}         this checkout's lock was taken over while it
//	                                       was paying; the database refused its write
//	    500 {"error":"..."}                the lock service or the database could not
//	                                       decide, or the lock was lost
//	GET  /orders/{id}
//	GET  /metrics                          the lock metrics, for Prometheus
//
// The locker comes from the LOCK_DISTRIBUTED_* variables, read from the
// environment and from the .env file named by -env (skipped if it does not
// exist; the environment wins). With LOCK_DISTRIBUTED_ENABLED unset the
// service runs without Redis and without mutual exclusion, and its fencing
// tokens count in this process only.
//
//	LOCK_DISTRIBUTED_ENABLED=true LOCK_DISTRIBUTED_STRATEGY=reject \
//	LOCK_DISTRIBUTED_NODES=redis://127.0.0.1:6379 go run . -db sqlite:checkout.db
//
// Flags:
//
//	-addr          listen address (default $CHECKOUT_ADDR, else 127.0.0.1:8080)
//	-env           .env file (default .env)
//	-db            database (default $CHECKOUT_DB, else sqlite:checkout.db): a SQLite
//	               file, shared by the instances on one machine, or a postgres:// URL
//	-instance      this instance's name in the ledger (default $CHECKOUT_INSTANCE,
//	               else host-pid)
//	-charge-delay  how long the simulated payment gateway takes (default 500ms)
//
// See README.md beside this file for two instances on one database.
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
func run(ctx context.Context, args []string, logw io.Writer, ready func(addr string)) (err error) {
	flags := flag.NewFlagSet("checkout", flag.ContinueOnError)
	flags.SetOutput(logw)
	addr := flags.String("addr", envOr("CHECKOUT_ADDR", "127.0.0.1:8080"), "listen address")
	envFile := flags.String("env", ".env", "a .env file with LOCK_DISTRIBUTED_* variables, skipped if missing; the environment wins over it")
	dsn := flags.String("db", envOr("CHECKOUT_DB", "sqlite:checkout.db"), "database: a SQLite file (sqlite:PATH or PATH) or a postgres:// URL")
	instance := flags.String("instance", envOr("CHECKOUT_INSTANCE", defaultInstance()), "this instance's name in the ledger")
	chargeDelay := flags.Duration("charge-delay", 500*time.Millisecond, "how long the simulated payment gateway takes")
	if err := flags.Parse(args); err != nil {
		return err
	}
	logger := log.New(logw, "checkout "+*instance+": ", log.LstdFlags)

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

	st, err := openStore(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	logger.Printf("database: %s", st.driver)

	mux, shutdownMetrics, err := newService(locker, st, simulatedCharge(*chargeDelay), *instance)
	if err != nil {
		return err
	}
	defer func() { // after the server: the checkouts in flight have been counted
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = errors.Join(err, shutdownMetrics(ctx))
	}()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
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

// simulatedCharge stands in for the payment gateway: delay of I/O (half
// a second by default, as in the seed), cut short when the lock is lost.
func simulatedCharge(delay time.Duration) chargeFunc {
	return func(ctx context.Context, orderID string, amount int64) error {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("charge for order %s abandoned: %w", orderID, context.Cause(ctx))
		}
	}
}

// defaultInstance names this process: host-pid.
func defaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "checkout"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
