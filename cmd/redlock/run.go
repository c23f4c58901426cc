package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/internal/redact"
)

const runUsage = `usage: redlock run --key K [--key K2 ...] [--permits P | --read] [--ttl 30s] [--wait 0] [--addrs host:port,...] [--grace 10s] -- command [args...]

Runs command only while holding the distributed lock K: a flock for cron
jobs that run on many hosts. Several --key flags take several locks at
once, all or nothing (redlock's DoMany): the command runs only while it
holds every one of them. With --permits P (and one --key), K names a
semaphore of P permits instead, and command runs while holding one of
them, so at most P copies run at once across the hosts (the permits are
the locks K:permit:0 to K:permit:P-1; "busy" then means all P were
held). --read takes a reader's share of one key (redlock's DoRead):
commands run with --read on the same key run side by side, and one
without waits for them (as a writer). The lock is renewed every TTL/3 while the
command runs. When the lock is lost (a renewal fails on a quorum of
masters), the command's process group gets SIGTERM, then SIGKILL after
--grace. SIGINT or SIGTERM to redlock run is passed on the same way. On
Linux the command is killed if redlock run itself dies (even by SIGKILL),
since nothing would renew the lock any more.

Masters: --addrs (host:port or redis:// URLs), else LOCK_DISTRIBUTED_NODES
(comma-separated redis:// URLs). One master gives a single-instance lock,
several a Redlock. Messages show a URL's user info (password) as xxxxx.

redlock run exits with the command's own status. A command that could not
be executed (not executable, a directory, exec format error, bad
interpreter) gives 126; one not found, 127.
`

// run is the redlock run subcommand.
func run(args []string) int {
	return runWith(context.Background(), args, os.Stdin, os.Stdout, os.Stderr, os.LookupEnv)
}

// runWith is run with its environment passed in, for tests.
func runWith(parent context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := newFlags("run", runUsage, stdout, stderr)
	var (
		keys             []string
		read             bool
		ttl, wait, grace time.Duration
		addrs            string
		permits          int
	)
	fs.Strings(&keys, "key", "the lock's key (required; repeat it to hold several keys at once, all or nothing)")
	fs.Bool(&read, "read", "take a shared (reader's) lock on the one --key: other --read runs may hold it too")
	fs.Duration(&ttl, "ttl", 30*time.Second, true, "lock lifetime on each master; renewed every TTL/3 while the command runs")
	fs.Duration(&wait, "wait", 0, false, "how long to wait for a held lock (0: one attempt)")
	fs.StringVar(&addrs, "addrs", "", "comma-separated masters, host:port or redis:// URLs (default: $"+envconfig.VarNodes+")")
	fs.Int(&permits, "permits", 0, 0, 3, "run while holding one of this many permits of the semaphore --key (0: a plain lock)")
	fs.Duration(&grace, "grace", 10*time.Second, false, "time between SIGTERM and SIGKILL when the command must stop")
	if status, ok := fs.parse(args); !ok {
		return status
	}
	argv := fs.Args()
	usage := fs.usage
	switch {
	case len(keys) == 0:
		return usage("--key is required")
	case read && len(keys) > 1:
		return usage("--read takes one --key")
	case len(argv) == 0:
		return usage("no command given (put it after --)")
	}
	nodes, from, err := runNodes(addrs, lookup)
	if err != nil {
		return usage("%v", err)
	}

	var strategy redlock.Strategy = redlock.Reject()
	if wait > 0 {
		strategy = &waitUntil{deadline: time.Now().Add(wait), every: min(wait/10+time.Millisecond, 250*time.Millisecond)}
	}
	cfg := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyRetry, TTL: ttl, Retries: 0, RetryDelay: 0, Nodes: nodes}
	locker, closer, err := cfg.Open(redlock.WithStrategy(strategy))
	if err != nil {
		return usage("%v", nodesError(from, err))
	}
	defer closer.Close()
	do, what, err := holder(locker, keys, permits, read)
	if err != nil {
		return usage("%v", err)
	}

	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var (
		started  bool
		status   int
		startErr error
	)
	err = do(ctx, func(ctx context.Context) error {
		started, status, startErr = runCommand(ctx, argv, stdio{in: stdin, out: stdout, err: stderr}, grace)
		return startErr
	})
	switch {
	case startErr != nil: // the command did not run, whatever became of the lock
		fmt.Fprintf(stderr, "redlock run: %v\n", startErr)
		return status
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Fprintf(stderr, "redlock run: lost %s while the command ran (status %d): %v\n", what, status, err)
		return exitLost
	case started:
		if err != nil { // the command ran; only the release failed
			fmt.Fprintf(stderr, "redlock run: %v\n", err)
		}
		return status
	case errors.Is(err, redlock.ErrInvalid):
		return usage("%v", err)
	case ctx.Err() != nil:
		fmt.Fprintf(stderr, "redlock run: interrupted before the command started: %v\n", err)
		return exitInterrupted
	case errors.Is(err, redlock.ErrNotAcquired):
		fmt.Fprintf(stderr, "redlock run: could not take %s: held elsewhere; not running the command: %v\n", what, err)
		return exitBusy
	case errors.Is(err, redlock.ErrUnavailable):
		fmt.Fprintf(stderr, "redlock run: too few masters answered; not running the command: %v\n", err)
		return exitUnavailable
	}
	fmt.Fprintf(stderr, "redlock run: %v\n", err)
	return exitFailure
}

// holder returns how to run a function while holding the lock key (Do),
// the locks keys all at once (DoMany), or one of permits permits of the
// semaphore keys[0] when permits > 0, and what it holds, for messages.
func holder(locker *redlock.Redlock, keys []string, permits int, read bool) (func(context.Context, func(context.Context) error) error, string, error) {
	switch {
	case read && permits > 0:
		return nil, "", fmt.Errorf("--read and --permits do not go together")
	case read:
		return func(ctx context.Context, fn func(context.Context) error) error {
			return locker.DoRead(ctx, keys[0], fn)
		}, fmt.Sprintf("a read lock on %q", keys[0]), nil
	case permits > 0 && len(keys) > 1:
		return nil, "", fmt.Errorf("--permits takes one --key (the semaphore's name), not %d", len(keys))
	case permits > 0:
		sem, err := redlock.NewSemaphore(locker, keys[0], permits)
		if err != nil {
			return nil, "", err
		}
		return func(ctx context.Context, fn func(context.Context) error) error {
			return sem.Do(ctx, fn)
		}, fmt.Sprintf("a permit of semaphore %q (%d permits)", keys[0], permits), nil
	case len(keys) == 1:
		return func(ctx context.Context, fn func(context.Context) error) error {
			return locker.Do(ctx, keys[0], fn)
		}, fmt.Sprintf("lock %q", keys[0]), nil
	}
	return func(ctx context.Context, fn func(context.Context) error) error {
		return locker.DoMany(ctx, keys, fn)
	}, fmt.Sprintf("locks %q", keys), nil
}

// stdio is a command's standard streams, and variables added to the
// environment it inherits.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	env      []string
}

// runCommand starts argv in a process group of its own, killed with us on
// Linux, and supervises it under ctx (see supervise): the rules of
// redlock run and redlock elect. It reports whether the command started,
// its status (the shell's, see startStatus, when it did not), and the
// start error.
func runCommand(ctx context.Context, argv []string, std stdio, grace time.Duration) (started bool, status int, startErr error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = std.in, std.out, std.err
	if std.env != nil {
		cmd.Env = append(os.Environ(), std.env...)
	}
	ownGroup(cmd)
	dieWithUs(cmd)
	if err := cmd.Start(); err != nil {
		return false, startStatus(cmd, err), err
	}
	return true, supervise(ctx, cmd, grace), nil
}

// startStatus is the status a shell reports for a command that could not
// be started (err from cmd.Start): 127 when it does not exist, 126 for
// every other failure, as bash does. This includes ENOEXEC, "exec format
// error", for an executable file that is neither a binary nor a script
// with a #! line (a shell would run such a file with sh; os/exec does
// not), and ENOENT for a command that exists, whose #! interpreter or
// dynamic loader is what is missing (bash: "bad interpreter", 126).
func startStatus(cmd *exec.Cmd, err error) int {
	if errors.Is(err, exec.ErrNotFound) {
		return exitNotFound
	}
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(cmd.Path); serr != nil {
			return exitNotFound
		}
	}
	return exitNotExecutable
}

// supervise waits for cmd and returns its exit status. When ctx ends
// first (the lock was lost, or redlock run was signalled) it sends SIGTERM
// to the command's process group and SIGKILL after grace; on a lost lock
// the group gets SIGKILL in the end anyway, so no child of the command
// outlives the lock.
func supervise(ctx context.Context, cmd *exec.Cmd, grace time.Duration) int {
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	select {
	case err = <-waited:
		return exitStatus(cmd, err)
	case <-ctx.Done():
	}
	_ = signalGroup(cmd, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err = <-waited:
	case <-t.C:
		_ = signalGroup(cmd, syscall.SIGKILL)
		err = <-waited
	}
	if errors.Is(context.Cause(ctx), redlock.ErrLockLost) {
		_ = signalGroup(cmd, syscall.SIGKILL) // stragglers of the group, if any
	}
	return exitStatus(cmd, err)
}

// exitStatus is the status a shell would report: the exit code, or 128
// plus the signal that ended the command.
func exitStatus(cmd *exec.Cmd, err error) int {
	st := cmd.ProcessState
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := st.ExitCode(); code >= 0 {
		return code
	}
	return 1
}

// runNodes returns the masters as redis URLs, from --addrs or else from
// LOCK_DISTRIBUTED_NODES, each checked as envconfig checks that variable,
// and where they came from: "--addrs" or the variable's name. An error
// names where the bad URL came from, and never shows a password.
func runNodes(addrs string, lookup func(string) (string, bool)) (urls []string, from string, err error) {
	from = "--addrs"
	if addrs == "" {
		addrs, _ = lookup(envconfig.VarNodes)
		from = envconfig.VarNodes
	}
	for a := range strings.SplitSeq(addrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = "redis://" + a
		}
		urls = append(urls, a)
	}
	if len(urls) == 0 {
		return nil, from, fmt.Errorf("no masters: give --addrs or set %s", envconfig.VarNodes)
	}
	withUserInfo := slices.ContainsFunc(urls, func(u string) bool { return strings.Contains(u, "@") })
	for i, u := range urls {
		if _, err := envconfig.ParseNode(u); err != nil {
			if withUserInfo && !strings.Contains(u, "@") {
				// u may be the head of a password cut at a ',', with
				// nothing to mask it.
				return nil, from, fmt.Errorf("%s: URL %d of %d is malformed (not shown: it may hold part of a password; write a ',' in a password as %%2C)", from, i+1, len(urls))
			}
			return nil, from, nodesError(from, err)
		}
	}
	return urls, from, nil
}

// nodesError is err, an error of envconfig, worded for the command line:
// an error about LOCK_DISTRIBUTED_NODES names from (where the URLs came
// from, see runNodes) instead of the variable. User info is masked.
func nodesError(from string, err error) error {
	var e *envconfig.Error
	if errors.As(err, &e) && e.Var == envconfig.VarNodes {
		return fmt.Errorf("%s: %s", from, redact.URLs(e.Err.Error()))
	}
	return errors.New(redact.URLs(err.Error()))
}

// waitUntil retries every interval until a deadline: --wait bounds the
// wait for the lock without bounding the command, which runs under the
// same context. Release notifications wake a waiter before its interval
// is up.
type waitUntil struct {
	deadline time.Time
	every    time.Duration
}

func (w *waitUntil) Backoff(int) (time.Duration, bool) {
	left := time.Until(w.deadline)
	if left <= 0 {
		return 0, false
	}
	return min(w.every, left), true
}
