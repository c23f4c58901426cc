package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunPermitsAdmitsUpToK: with --permits 2, a run is busy only while
// both permits are held elsewhere, and runs while one of them is.
func TestRunPermitsAdmitsUpToK(t *testing.T) {
	addr, c := oneMaster(t)
	s, err := redlock.NewSingle(adapt(t, c), redlock.WithTTL(30*time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	sem, err := redlock.NewSemaphore(s, "workers", 2)
	require.NoError(t, err)
	first, err := sem.Acquire(t.Context())
	require.NoError(t, err)
	defer first.Unlock(context.Background())
	marker := filepath.Join(t.TempDir(), "ran")

	st, _, errs := runT(t, "--addrs", addr, "--key", "workers", "--permits", "2", "--", "touch", marker)
	assert.Equal(t, 0, st, "one permit of two is free: %s", errs)
	assert.FileExists(t, marker)
	require.NoError(t, os.Remove(marker))

	second, err := sem.Acquire(t.Context())
	require.NoError(t, err)
	defer second.Unlock(context.Background())
	for _, wait := range []string{"0", "300ms"} {
		st, _, errs = runT(t, "--addrs", addr, "--key", "workers", "--permits", "2", "--wait", wait, "--", "touch", marker)
		assert.Equal(t, exitBusy, st, "--wait %s: %s", wait, errs)
		assert.Contains(t, errs, "permit")
		assert.NoFileExists(t, marker, "the command must not run without a permit")
	}
	n, err := c.Exists(t.Context(), sem.SlotKey(0), sem.SlotKey(1)).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(2), n, "the test's permits are untouched")
}

// TestRunPermitsBound starts four runs with --permits 2 of a command that
// takes one of two directories (mkdir is atomic) and fails if both are
// taken: a third copy inside at once would exit 9.
func TestRunPermitsBound(t *testing.T) {
	addr, _ := oneMaster(t)
	dir := t.TempDir()
	script := `d="$0/a"; mkdir "$d" 2>/dev/null || { d="$0/b"; mkdir "$d" 2>/dev/null; } || exit 9; echo x >> "$0/log"; sleep 0.2; rmdir "$d"`
	var wg sync.WaitGroup
	sts := make([]int, 4)
	for i := range sts {
		wg.Go(func() {
			sts[i], _, _ = runT(t, "--addrs", addr, "--key", "workers", "--permits", "2", "--wait", "30s", "--", "sh", "-c", script, dir)
		})
	}
	wg.Wait()
	assert.Equal(t, []int{0, 0, 0, 0}, sts, "all ran, never more than two at once")
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	assert.Equal(t, "x\nx\nx\nx\n", string(log))
}

func TestRunPermitsUsage(t *testing.T) {
	for _, p := range []int{-1, 256 + 1} {
		st, _, errs := runT(t, "--addrs", "127.0.0.1:1", "--key", "k", "--permits", strconv.Itoa(p), "--", "true")
		assert.Equal(t, exitUsage, st, "--permits %d: %s", p, errs)
	}
}

// TestRunPermitsLostStopsTheCommand deletes the permit (its slot's key)
// under a running command: the renewal fails and the command is stopped.
func TestRunPermitsLostStopsTheCommand(t *testing.T) {
	addr, c := oneMaster(t)
	dir := t.TempDir()
	done := make(chan int, 1)
	var errs string
	go func() {
		var st int
		st, _, errs = runT(t, "--addrs", addr, "--key", "workers", "--permits", "1", "--ttl", "1s", "--grace", "200ms",
			"--", "sh", "-c", `touch "$0/started"; exec sleep 60`, dir)
		done <- st
	}()
	waitFile(t, filepath.Join(dir, "started"))
	require.NoError(t, c.Del(t.Context(), "workers:permit:0").Err(), "the permit disappears under the holder")
	select {
	case st := <-done:
		assert.Equal(t, exitLost, st, errs)
		assert.Contains(t, errs, "lost a permit")
	case <-time.After(30 * time.Second): // a watchdog against a hang, not a timing claim
		t.Fatal("the command was not stopped after the permit was lost")
	}
}
