package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
)

const electUsage = `usage: redlock elect --name N [--ttl 10s] [--value V] [--addrs host:port,...] [--grace 10s] -- command [args...]

Campaigns in the leader election N and runs command once this host leads,
only while it leads: one instance of a scheduler among many hosts. The
campaign waits as long as it takes (until SIGINT or SIGTERM), woken at
once when the leader resigns, and retrying every TTL/10 otherwise (a
leader that died frees the election when its lease expires, within the
TTL). The lease is renewed every TTL/3 while the command runs.

The command runs as under redlock run: in a process group of its own;
when the leadership is lost (a renewal fails on a quorum of masters), the
group gets SIGTERM, then SIGKILL after --grace; SIGINT or SIGTERM to
redlock elect is passed on the same way; on Linux the command is killed if
redlock elect itself dies. When the command ends, redlock elect resigns,
announcing it, so a waiting host takes over at once, and exits: it does
not campaign again (restart it, for example with systemd's
Restart=always, to stay a candidate).

The command's environment has REDLOCK_ELECTION (the name) and
REDLOCK_TERM (the term: a fencing token strictly greater than every
earlier leader's, to send with its writes).

Masters: --addrs (host:port or redis:// URLs), else LOCK_DISTRIBUTED_NODES,
as for redlock run.

redlock elect exits with the command's own status, as redlock run does.
`

// elect is the redlock elect subcommand.
func elect(args []string) int {
	return electWith(context.Background(), args, stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.LookupEnv)
}

// electFlags are redlock elect's flags.
type electFlags struct {
	name, value, addrs string
	ttl, grace         time.Duration
	argv               []string
	// usage reports a usage error, see cmdFlags.usage.
	usage func(format string, a ...any) int
}

// parseElect parses the flags; it returns the status to exit with when
// the command must not run (0 after -h).
func parseElect(args []string, std stdio) (electFlags, int, bool) {
	var f electFlags
	fs := newFlags("elect", electUsage, std.out, std.err)
	fs.StringVar(&f.name, "name", "", "the election's name, its lock key (required)")
	fs.StringVar(&f.value, "value", defaultValue(), "who this candidate is, as Leader and Observe report it")
	fs.Duration(&f.ttl, "ttl", 10*time.Second, true, "the leader's lease on each master; renewed every TTL/3")
	fs.StringVar(&f.addrs, "addrs", "", "comma-separated masters, host:port or redis:// URLs (default: $"+envconfig.VarNodes+")")
	fs.Duration(&f.grace, "grace", 10*time.Second, false, "time between SIGTERM and SIGKILL when the command must stop")
	if status, ok := fs.parse(args); !ok {
		return f, status, false
	}
	f.argv = fs.Args()
	switch {
	case f.name == "":
		return f, fs.usage("--name is required"), false
	case len(f.argv) == 0:
		return f, fs.usage("no command given (put it after --)"), false
	}
	f.usage = fs.usage
	return f, exitOK, true
}

// defaultValue names this candidate: host name and process id.
func defaultValue() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// electWith is elect with its environment passed in, for tests.
func electWith(parent context.Context, args []string, std stdio, lookup func(string) (string, bool)) int {
	f, status, ok := parseElect(args, std)
	if !ok {
		return status
	}
	usage := func(err error) int { return f.usage("%v", err) }
	nodes, from, err := runNodes(f.addrs, lookup)
	if err != nil {
		return usage(err)
	}
	cfg := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyRetry, TTL: f.ttl, Nodes: nodes}
	locker, closer, err := cfg.Open()
	if err != nil {
		return usage(nodesError(from, err))
	}
	defer closer.Close()
	e, err := redlock.NewElection(locker, f.name, redlock.WithTTL(f.ttl))
	if err != nil {
		return usage(err)
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := e.Campaign(ctx, f.value)
	switch {
	case errors.Is(err, redlock.ErrInvalid):
		return usage(err)
	case err != nil && ctx.Err() != nil:
		fmt.Fprintf(std.err, "redlock elect: interrupted while campaigning: %v\n", err)
		return exitInterrupted
	case err != nil:
		fmt.Fprintf(std.err, "redlock elect: %v\n", err)
		return exitFailure
	}
	return lead(ctx, l, f, std)
}

// lead runs the command while l leads, then resigns.
func lead(ctx context.Context, l *redlock.Leadership, f electFlags, std stdio) int {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopAfter := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
	std.env = []string{"REDLOCK_ELECTION=" + f.name, fmt.Sprintf("REDLOCK_TERM=%d", l.Term())}
	started, status, startErr := runCommand(cctx, f.argv, std, f.grace)
	stopAfter()
	lost := errors.Is(context.Cause(l.Context()), redlock.ErrLockLost)
	rerr := l.Resign(context.WithoutCancel(ctx))
	switch {
	case !started:
		fmt.Fprintf(std.err, "redlock elect: %v\n", startErr)
		return status
	case lost:
		fmt.Fprintf(std.err, "redlock elect: lost the leadership of %q while the command ran (status %d): %v\n",
			f.name, status, context.Cause(l.Context()))
		return exitLost
	case rerr != nil: // the command ran; only the resignation failed
		fmt.Fprintf(std.err, "redlock elect: %v\n", rerr)
	}
	return status
}
