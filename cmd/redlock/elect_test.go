package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// electT runs redlock elect in-process under ctx with no environment,
// returning its status and what it wrote.
func electT(ctx context.Context, args ...string) (status int, stdout, stderr string) {
	var out, errb bytes.Buffer
	std := stdio{in: strings.NewReader(""), out: &out, err: &errb}
	status = electWith(ctx, args, std, func(string) (string, bool) { return "", false })
	return status, out.String(), errb.String()
}

func TestElectRunsTheCommandAsLeader(t *testing.T) {
	addr, c := oneMaster(t)
	st, out, errs := electT(t.Context(), "--addrs", addr, "--name", "sched", "--value", "me",
		"--", "sh", "-c", `echo "$REDLOCK_ELECTION $REDLOCK_TERM"; exit 7`)
	assert.Equal(t, 7, st, errs)
	fields := strings.Fields(out)
	require.Len(t, fields, 2, out)
	assert.Equal(t, "sched", fields[0], "the command sees the election")
	term, err := strconv.ParseInt(fields[1], 10, 64)
	require.NoError(t, err)
	assert.Positive(t, term, "and its term")
	n, err := c.Exists(t.Context(), "sched").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the leader resigned after the command")
}

// A second host waits while the first leads, and runs once the first's
// command ended and it resigned, with a higher term.
func TestElectSecondHostTakesOver(t *testing.T) {
	addr, _ := oneMaster(t)
	dir := t.TempDir()
	log, release := filepath.Join(dir, "log"), filepath.Join(dir, "release")
	first := `echo "first $REDLOCK_TERM" >> ` + log + `; while [ ! -f ` + release + ` ]; do sleep 0.01; done`
	second := `echo "second $REDLOCK_TERM" >> ` + log
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	wg.Go(func() {
		statuses[0], _, _ = electT(t.Context(), "--addrs", addr, "--name", "sched", "--", "sh", "-c", first)
	})
	testwait.Until(t, "the first host leading", func() bool { return strings.HasPrefix(readFile(log), "first") })
	wg.Go(func() {
		statuses[1], _, _ = electT(t.Context(), "--addrs", addr, "--name", "sched", "--", "sh", "-c", second)
	})
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	wg.Wait()
	assert.Equal(t, []int{0, 0}, statuses)
	lines := strings.Fields(readFile(log))
	require.Len(t, lines, 4, readFile(log))
	assert.Equal(t, []string{"first", "second"}, []string{lines[0], lines[2]}, "the second ran after the first")
	t1, _ := strconv.Atoi(lines[1])
	t2, _ := strconv.Atoi(lines[3])
	assert.Greater(t, t2, t1, "terms increase")
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// A lost leadership (the key vanished, so renewals fail) stops the
// command, and redlock elect exits 79.
func TestElectLostLeadershipStopsTheCommand(t *testing.T) {
	addr, c := oneMaster(t)
	marker := filepath.Join(t.TempDir(), "started")
	done := make(chan int, 1)
	go func() {
		st, _, _ := electT(t.Context(), "--addrs", addr, "--name", "sched", "--ttl", "1s", "--grace", "100ms",
			"--", "sh", "-c", "touch "+marker+"; exec sleep 60")
		done <- st
	}()
	testwait.Until(t, "the command starting", func() bool { _, err := os.Stat(marker); return err == nil })
	require.NoError(t, c.Del(t.Context(), "sched").Err())
	assert.Equal(t, exitLost, <-done)
}

func TestElectInterruptedWhileCampaigning(t *testing.T) {
	addr, c := oneMaster(t)
	require.NoError(t, c.Set(t.Context(), "sched", "someone-else", time.Minute).Err())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		st, _, _ := electT(ctx, "--addrs", addr, "--name", "sched", "--", "touch", filepath.Join(t.TempDir(), "ran"))
		done <- st
	}()
	testwait.Until(t, "a campaign waiting", func() bool {
		n, err := c.PubSubNumSub(t.Context(), "redlock:released:sched").Result()
		return err == nil && n["redlock:released:sched"] > 0
	})
	cancel()
	assert.Equal(t, exitInterrupted, <-done)
}

func TestElectUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"no name":     {"--addrs", "127.0.0.1:1", "--", "true"},
		"no command":  {"--addrs", "127.0.0.1:1", "--name", "x"},
		"empty value": {"--addrs", "127.0.0.1:1", "--name", "x", "--value", "", "--", "true"},
		"bad ttl":     {"--addrs", "127.0.0.1:1", "--name", "x", "--ttl", "0s", "--", "true"},
		"no masters":  {"--name", "x", "--", "true"},
	} {
		st, _, errs := electT(t.Context(), args...)
		assert.Equal(t, exitUsage, st, "%s: %s", name, errs)
	}
}
