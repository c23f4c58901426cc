package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

Exit status: the command's own (128+signal when a signal ended it), or
   79  the leadership was lost while the command ran; the command was stopped
  126  the command could not be executed; 127 it was not found
   64  bad usage
  130  interrupted while campaigning; the command did not run
    1  any other error before the command ran

flags:
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
}

// parseElect parses the flags; it returns the status to exit with when
// the command must not run (0 after -h).
func parseElect(args []string, stderr io.Writer) (electFlags, int, bool) {
	var f electFlags
	fs := flag.NewFlagSet("elect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, electUsage); fs.PrintDefaults() }
	fs.StringVar(&f.name, "name", "", "the election's name, its lock key (required)")
	fs.StringVar(&f.value, "value", defaultValue(), "who this candidate is, as Leader and Observe report it")
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "the leader's lease on each master; renewed every TTL/3")
	fs.StringVar(&f.addrs, "addrs", "", "comma-separated masters, host:port or redis:// URLs (default: $"+envconfig.VarNodes+")")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the command must stop")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f, 0, false
		}
		return f, exitUsage, false
	}
	f.argv = fs.Args()
	msg := ""
	switch {
	case f.name == "":
		msg = "--name is required"
	case len(f.argv) == 0:
		msg = "no command given (put it after --)"
	case f.grace < 0:
		msg = fmt.Sprintf("--grace %v is negative", f.grace)
	}
	if msg != "" {
		fmt.Fprintf(stderr, "redlock elect: %s\n", msg)
		return f, exitUsage, false
	}
	return f, 0, true
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
	f, status, ok := parseElect(args, std.err)
	if !ok {
		return status
	}
	usage := func(err error) int {
		fmt.Fprintf(std.err, "redlock elect: %v\n", err)
		return exitUsage
	}
	nodes, err := runNodes(f.addrs, lookup)
	if err != nil {
		return usage(err)
	}
	cfg := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyRetry, TTL: f.ttl, Nodes: nodes}
	locker, closer, err := cfg.Open()
	if err != nil {
		return usage(err)
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
		return 1
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
