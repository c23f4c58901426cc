package main

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunSeveralKeys: with several --key flags the command runs only when
// every key is free, and holds them all while it runs.
func TestRunSeveralKeys(t *testing.T) {
	addr, c := oneMaster(t)
	s, err := redlock.NewSingle(adapt(t, c), redlock.WithTTL(30*time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	held, err := s.Lock(t.Context(), "job:b")
	require.NoError(t, err)

	marker := filepath.Join(t.TempDir(), "ran")
	st, _, errs := runT(t, "--addrs", addr, "--key", "job:a", "--key", "job:b", "--", "touch", marker)
	assert.Equal(t, exitBusy, st, errs)
	assert.NoFileExists(t, marker, "one key held elsewhere: the command must not run")
	assert.Zero(t, c.Exists(t.Context(), "job:a").Val(), "all or nothing: job:a was not kept")
	require.NoError(t, held.Unlock(context.Background()))

	// While the command runs, both keys are held: it checks with EXISTS.
	st, out, errs := runT(t, "--addrs", addr, "--key", "job:b", "--key", "job:a", "--",
		"redis-cli", "-h", "127.0.0.1", "-p", portOf(t, addr), "exists", "job:a", "job:b")
	assert.Equal(t, 0, st, errs)
	assert.Equal(t, "2\n", out, "both keys held while the command ran")
	assert.Zero(t, c.Exists(t.Context(), "job:a", "job:b").Val(), "released after")

	st, _, _ = runT(t, "--addrs", addr, "--key", "job:a", "--key", "", "--", "true")
	assert.Equal(t, exitUsage, st, "an empty key")
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return port
}

// TestRunRead: --read runs beside a reader that holds the key, not beside
// a mutex; a run without --read waits for readers.
func TestRunRead(t *testing.T) {
	addr, c := oneMaster(t)
	s, err := redlock.NewSingle(adapt(t, c), redlock.WithTTL(30*time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	reader, err := s.RLock(t.Context(), "job:r")
	require.NoError(t, err)
	st, _, errs := runT(t, "--addrs", addr, "--read", "--key", "job:r", "--", "true")
	assert.Equal(t, 0, st, errs, "readers share the key")
	st, _, errs = runT(t, "--addrs", addr, "--key", "job:r", "--", "true")
	assert.Equal(t, exitBusy, st, errs, "a run without --read is a writer")
	require.NoError(t, reader.Unlock(context.Background()))

	held, err := s.Lock(t.Context(), "job:r")
	require.NoError(t, err)
	st, _, errs = runT(t, "--addrs", addr, "--read", "--key", "job:r", "--", "true")
	assert.Equal(t, exitBusy, st, errs, "a reader while a mutex holds")
	require.NoError(t, held.Unlock(context.Background()))

	st, _, _ = runT(t, "--addrs", addr, "--read", "--key", "a", "--key", "b", "--", "true")
	assert.Equal(t, exitUsage, st, "--read with several keys")
}
