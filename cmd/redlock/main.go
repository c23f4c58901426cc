// Command redlock shows and measures the redlock library, runs jobs under a
// lock, and inspects and repairs locks in production.
//
//	redlock demo [--addrs host:port,...]   workers serialising on one record, then node failures
//	redlock bench [--addrs ...] [--peers] [--out chart.png]   Lock+Unlock cost, Single vs Redlock over N masters
//	redlock run --key K [--ttl 30s] [--wait 0] -- command...   run a command only while holding the lock (cron)
//	redlock elect --name N [--ttl 10s] -- command...   run a command only while this host leads election N
//	redlock inspect (--key K | --prefix P) [--json] [--watch D]   a lock per master, and whether a quorum holds it (read-only)
//	redlock release --key K (--token T | --force)   release a lock from another process (a crashed job's), as Unlock does
//
// Each subcommand prints its own flags, and its exit statuses, with -h.
// Commands print only their own words: go-redis's log lines (a pool
// failing to dial, for instance) are dropped, since the commands report
// every failure themselves.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"

	"github.com/redis/go-redis/v9"
)

// commands maps a subcommand to its entry point, which gets the arguments
// after the subcommand's name and returns the process exit status.
var commands = map[string]func(args []string) int{
	"demo":    demo,
	"bench":   bench,
	"run":     run,
	"elect":   elect,
	"inspect": inspect,
	"release": release,
}

func main() {
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		usage()
		os.Exit(2)
	}
	quietRedis()
	os.Exit(commands[os.Args[1]](os.Args[2:]))
}

func usage() {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: redlock <command> [flags]\ncommands: %v\n", names)
}

// quietRedis stops go-redis from writing its own log lines on stderr
// (such as "redis: connection pool: failed to dial after 5 attempts",
// once per pool, before the command's own message): every subcommand
// reports failures in its own words. main calls it before any
// subcommand runs.
func quietRedis() { redis.SetLogger(discardLogger{}) }

// discardLogger is a go-redis logger that drops every line.
type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
