// Command redlock shows and measures the redlock library, runs jobs under a
// lock, and inspects and repairs locks in production.
//
//	redlock demo [--addrs host:port,...]   workers serialising on one record, then node failures
//	redlock run --key K [--ttl 30s] [--wait 0] -- command...   run a command only while holding the lock (cron)
//	redlock elect --name N [--ttl 10s] -- command...   run a command only while this host leads election N
//	redlock bench [--addrs ...] [--peers] [--out chart.png]   Lock+Unlock cost, Single vs Redlock over N masters
//	redlock inspect (--key K | --prefix P) [--json] [--watch D]   a lock per master, and whether a quorum holds it (read-only)
//	redlock release --key K (--token T | --force)   release a lock from another process (a crashed job's), as Unlock does
//	redlock help [command]   the commands, or a command's help, flags and exit statuses
//
// Every command takes -h (or --help) for its help. The exit statuses are
// the same for every command (see exitStatusHelp). Commands print only
// their own words: go-redis's log lines (a pool failing to dial, for
// instance) are dropped, since the commands report every failure
// themselves.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// command is a subcommand: its name, what it does in one line, and its
// entry point, which gets the arguments after the name and returns the
// exit status.
type command struct {
	name, summary string
	run           func(args []string) int
}

// commands are the subcommands, in the order redlock help lists them.
var commands = []command{
	{"demo", "workers taking turns on one record, then masters failing one by one", demo},
	{"run", "run a command only while holding a lock (a flock for cron jobs on many hosts)", run},
	{"elect", "run a command only while this host leads an election", elect},
	{"bench", "measure Lock+Unlock: Single against Redlock over N masters", bench},
	{"inspect", "show a lock on each master, and whether a quorum holds it (read-only)", inspect},
	{"release", "release a lock from another process (a crashed job's)", release},
}

// helpSummary is the help command's line in the list of commands.
const helpSummary = "list the commands, or show a command's help: redlock help <command>"

func main() {
	quietRedis()
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the command args name and returns the exit status.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		switch {
		case len(rest) == 0 || len(rest) == 1 && rest[0] == "help":
			fmt.Fprint(stdout, mainUsage())
			return exitOK
		case len(rest) > 1:
			fmt.Fprintf(stderr, "redlock help: want one command, got %q\n(redlock help lists the commands)\n", rest)
			return exitUsage
		}
		name, rest = rest[0], []string{"-h"}
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(rest)
		}
	}
	fmt.Fprintf(stderr, "redlock: unknown command %q\n(redlock help lists the commands)\n", name)
	return exitUsage
}

// mainUsage is what redlock help prints: every command with its summary,
// and the exit statuses.
func mainUsage() string {
	var b strings.Builder
	b.WriteString("usage: redlock <command> [flags]\n\n" +
		"Shows and measures the redlock library (distributed locks over Redis),\n" +
		"runs jobs under a lock, and inspects and repairs locks.\n\n" +
		"commands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-8s %s\n", "help", helpSummary)
	b.WriteString("\nEvery command takes -h (or --help) for its help and flags.\n\n")
	b.WriteString(exitStatusHelp)
	return b.String()
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
