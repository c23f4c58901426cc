package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

const releaseUsage = `usage: redlock release --key K (--token T | --force) [--addrs host:port,...] [--timeout 1s]

Releases the lock K held by token T from another process (the lock of a
crashed job) with the script Unlock runs, through the goredis adapter: on
each master K is deleted only if it holds T, and the release is announced
on redlock:released:K so that waiters try again at once. It prints, per
master, released, not held by that token, or the error, then a summary.
Tokens are shown by their first 8 characters; redlock inspect
--full-tokens shows them whole.

--force releases K whatever token holds it: on each master it reads the
token (GET K), says on stderr what it is about to delete, then runs the
same script with that token, so a key that changed hands in between is
left alone (and reported).

Masters: as for redlock run: --addrs (host:port or redis:// URLs), else
LOCK_DISTRIBUTED_NODES. They are shown as host:port, never with user info.

It succeeds (0) when it released K on at least one master and at least a
quorum answered: the token (with --force, each token found) holds no
quorum any more. It fails (1) when no master that answered held K with
that token (a wrong token, or the lock expired or was released already),
and exits with 69 when fewer than a quorum answered: the token may still
hold the lock.
`

// releaseOutcome is what release did on one master.
type releaseOutcome struct {
	found    string // --force: the token GET found ("" when none)
	released bool
	err      error
}

// release is the redlock release subcommand.
func release(args []string) int {
	return releaseWith(context.Background(), args, os.Stdout, os.Stderr, os.LookupEnv)
}

// releaseWith is release with its environment passed in, for tests.
func releaseWith(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := newFlags("release", releaseUsage, stdout, stderr)
	var (
		key, token, addrs string
		force             bool
		timeout           time.Duration
	)
	fs.StringVar(&key, "key", "", "the lock's key (required)")
	fs.StringVar(&token, "token", "", "the holder's token: K is deleted only where it holds this")
	fs.Bool(&force, "force", "release K whatever token holds it (instead of --token)")
	fs.StringVar(&addrs, "addrs", "", "comma-separated masters, host:port or redis:// URLs (default: $"+envconfig.VarNodes+")")
	fs.Duration(&timeout, "timeout", time.Second, true, "how long to wait for each master's answer")
	if status, ok := fs.parse(args); !ok {
		return status
	}
	usage := fs.usage
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case key == "":
		return usage("--key is required")
	case token == "" && !force:
		return usage("--token is required (or --force, to release whatever token holds the key)")
	case token != "" && force:
		return usage("give --token or --force, not both")
	}
	ms, err := openMasters(addrs, lookup, timeout)
	if err != nil {
		return usage("%v", err)
	}
	defer closeMasters(ms)

	out := make([]releaseOutcome, len(ms))
	if force {
		eachMaster(ms, func(i int, m master) {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			found, err := m.c.Get(cctx, key).Result()
			if errors.Is(err, redis.Nil) {
				found, err = "", nil
			}
			out[i] = releaseOutcome{found: found, err: err}
		})
		for i, m := range ms {
			if out[i].found != "" {
				fmt.Fprintf(stderr, "redlock release: --force: deleting %q on %s, held by token %s\n", key, m.name, tokenShown(out[i].found, false))
			}
		}
	}
	eachMaster(ms, func(i int, m master) {
		t := token
		if force {
			t = out[i].found
		}
		if out[i].err != nil || t == "" {
			return
		}
		out[i].released, out[i].err = releaseOn(ctx, m, key, t, timeout)
	})
	return releaseReport(stdout, stderr, ms, out, key, token)
}

// eachMaster calls f for every master at once and waits for all.
func eachMaster(ms []master, f func(i int, m master)) {
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { f(i, m) })
	}
	wg.Wait()
}

// releaseOn runs Unlock's release (announcing) on one master, bounded by
// timeout: released, or not held there (false, nil), or an error.
func releaseOn(ctx context.Context, m master, key, token string, timeout time.Duration) (bool, error) {
	b, err := goredis.New(m.c)
	if err != nil {
		return false, err
	}
	l, err := redlock.NewSingle(b, redlock.WithNodeTimeout(timeout))
	if err != nil {
		return false, err
	}
	switch err := l.Unlock(ctx, key, token); {
	case err == nil:
		return true, nil
	case errors.Is(err, redlock.ErrNotHeld):
		return false, nil
	default:
		return false, err
	}
}

// releaseReport prints what happened on each master and the summary, and
// returns the exit status. token is "" for --force.
func releaseReport(stdout, stderr io.Writer, ms []master, out []releaseOutcome, key, token string) int {
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	var released, answered int
	for i, m := range ms {
		o := out[i]
		switch {
		case o.err != nil:
			fmt.Fprintf(tw, "%s\terror: %s\n", m.name, nodeError(o.err))
			continue
		case o.released:
			released++
			fmt.Fprintf(tw, "%s\treleased\n", m.name)
		case token != "":
			fmt.Fprintf(tw, "%s\tnot held by %s\n", m.name, tokenShown(token, false))
		case o.found == "":
			fmt.Fprintf(tw, "%s\tnot held\n", m.name)
		default:
			fmt.Fprintf(tw, "%s\tchanged hands after it was read; left alone\n", m.name)
		}
		answered++
	}
	q := quorum(len(ms))
	what := "whatever token held it"
	if token != "" {
		what = "token " + tokenShown(token, false)
	}
	fmt.Fprintf(tw, "released %q (%s) on %d of %s; %d answered (quorum %d)\n", key, what, released, nMasters(len(ms)), answered, q)
	tw.Flush()
	switch {
	case answered < q:
		fmt.Fprintf(stderr, "redlock release: only %d of %s answered (quorum %d): %q may still be held\n", answered, nMasters(len(ms)), q, key)
		return exitUnavailable
	case released == 0:
		if token == "" {
			fmt.Fprintf(stderr, "redlock release: nothing released: no master that answered held %q\n", key)
		} else {
			fmt.Fprintf(stderr, "redlock release: nothing released: no master that answered held %q with %s\n", key, what)
		}
		return exitFailure // nothing released
	}
	return exitOK
}
