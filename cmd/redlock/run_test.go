package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runT runs the subcommand in-process with no environment, returning its
// status and what it wrote.
func runT(t *testing.T, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	status = runWith(t.Context(), args, strings.NewReader(""), &out, &errb, func(string) (string, bool) { return "", false })
	return status, out.String(), errb.String()
}

// oneMaster starts a redis-server and returns its address and a client.
func oneMaster(t *testing.T) (string, *redis.Client) {
	t.Helper()
	addr := redistest.Start(t, 1).Addrs()[0]
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return addr, c
}

func TestRunPassesTheCommandsStatusAndOutput(t *testing.T) {
	addr, c := oneMaster(t)
	st, out, _ := runT(t, "--addrs", addr, "--key", "job", "--", "sh", "-c", "echo hello; exit 7")
	assert.Equal(t, 7, st)
	assert.Equal(t, "hello\n", out)
	st, _, _ = runT(t, "--addrs", addr, "--key", "job", "--", "true")
	assert.Equal(t, 0, st)
	st, _, _ = runT(t, "--addrs", addr, "--key", "job", "--", "sh", "-c", "kill -TERM $$")
	assert.Equal(t, 128+15, st, "a command ended by a signal reports 128+signal, as a shell does")
	n, err := c.Exists(t.Context(), "job").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lock is released after the command")
}

// A command that cannot be started gets the shell's statuses: 127 when
// it does not exist, 126 when it exists but cannot be executed (as bash
// reports each case). Nothing ran, and the lock is released.
func TestRunCommandCannotStart(t *testing.T) {
	addr, c := oneMaster(t)
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), mode))
		return p
	}
	marker := filepath.Join(dir, "ran")
	tests := []struct {
		name    string
		command string
		status  int
	}{
		{"absent path", "/no/such/command", exitNotFound},
		{"absent from PATH", "no-such-command-redlock-test", exitNotFound},
		{"not executable", file("plain.sh", "#!/bin/sh\ntouch "+marker+"\n", 0o644), exitNotExecutable},
		{"directory", t.TempDir(), exitNotExecutable},
		// execve refuses these with ENOEXEC ("exec format error"); Go,
		// unlike a shell, does not fall back to running a script with sh.
		{"text without shebang", file("noshebang", "touch "+marker+"\n", 0o755), exitNotExecutable},
		{"not a binary", file("garbage", "\x7fELF\x02\x01\x01\x00garbage", 0o755), exitNotExecutable},
		// execve says ENOENT for the interpreter, but the command exists:
		// bash calls it a bad interpreter, 126.
		{"missing interpreter", file("badinterp", "#!/no/such/interpreter\n", 0o755), exitNotExecutable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, errs := runT(t, "--addrs", addr, "--key", "job", "--", tt.command)
			assert.Equal(t, tt.status, st, errs)
			assert.Contains(t, errs, "redlock run: ")
		})
	}
	assert.NoFileExists(t, marker)
	n, err := c.Exists(t.Context(), "job").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lock is released when the command could not start")
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--addrs", "127.0.0.1:1", "--", "true"},                              // no key
		{"--addrs", "127.0.0.1:1", "--key", "k"},                              // no command
		{"--key", "k", "--", "true"},                                          // no masters
		{"--addrs", "127.0.0.1:1", "--key", "k", "--ttl", "0s", "--", "true"}, // bad TTL
		{"--addrs", "127.0.0.1:1", "--key", "k", "--wait", "-1s", "--", "true"},
		{"--bogus"},
	} {
		st, _, _ := runT(t, args...)
		assert.Equal(t, exitUsage, st, "run %v", args)
	}
}

// TestRunBusy holds the lock elsewhere: run must not start the command and
// must exit with the busy status, at once or after --wait.
func TestRunBusy(t *testing.T) {
	addr, c := oneMaster(t)
	s, err := redlock.NewSingle(adapt(t, c), redlock.WithTTL(30*time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	held, err := s.Lock(t.Context(), "job")
	require.NoError(t, err)
	defer held.Unlock(context.Background())

	marker := filepath.Join(t.TempDir(), "ran")
	for _, wait := range []string{"0", "300ms"} {
		st, _, errs := runT(t, "--addrs", addr, "--key", "job", "--wait", wait, "--", "touch", marker)
		assert.Equal(t, exitBusy, st, "--wait %s: %s", wait, errs)
		assert.NoFileExists(t, marker, "the command must not run without the lock")
	}
}

func TestRunUnavailable(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	st, _, errs := runT(t, "--addrs", "127.0.0.1:1", "--key", "job", "--", "touch", marker) // nothing listens on port 1
	assert.Equal(t, exitUnavailable, st, errs)
	assert.NoFileExists(t, marker)
}

// TestRunSerializes starts two runs of a command that fails if it finds
// another copy of itself inside (mkdir is atomic): with the lock they take
// turns and both succeed.
func TestRunSerializes(t *testing.T) {
	addr, _ := oneMaster(t)
	dir := t.TempDir()
	script := `mkdir "$0/inside" || exit 9; echo x >> "$0/log"; sleep 0.3; rmdir "$0/inside"`
	var wg sync.WaitGroup
	sts := make([]int, 2)
	for i := range sts {
		wg.Go(func() {
			sts[i], _, _ = runT(t, "--addrs", addr, "--key", "cron:report", "--wait", "30s", "--", "sh", "-c", script, dir)
		})
	}
	wg.Wait()
	assert.Equal(t, []int{0, 0}, sts, "both ran, one after the other")
	log, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	assert.Equal(t, "x\nx\n", string(log))
}

func TestRunUsesEnvNodes(t *testing.T) {
	addr, _ := oneMaster(t)
	env := func(k string) (string, bool) {
		if k == envconfig.VarNodes {
			return "redis://" + addr, true
		}
		return "", false
	}
	var out bytes.Buffer
	st := runWith(t.Context(), []string{"--key", "job", "--", "echo", "ok"}, strings.NewReader(""), &out, &out, env)
	assert.Equal(t, 0, st, out.String())
	assert.Equal(t, "ok\n", out.String())
}

// TestRunLockLostStopsTheCommand deletes the lock under a running command:
// the next renewal fails, and the command is stopped (by SIGTERM, or by
// SIGKILL after the grace period when it ignores SIGTERM).
func TestRunLockLostStopsTheCommand(t *testing.T) {
	for name, script := range map[string]string{
		"obeys SIGTERM":   `touch "$0/started"; exec sleep 60`,
		"ignores SIGTERM": `trap "" TERM; touch "$0/started"; sleep 60; echo survived`,
	} {
		t.Run(name, func(t *testing.T) {
			addr, c := oneMaster(t)
			dir := t.TempDir()
			done := make(chan int, 1)
			var errs string
			go func() {
				var st int
				st, _, errs = runT(t, "--addrs", addr, "--key", "job", "--ttl", "1s", "--grace", "200ms", "--", "sh", "-c", script, dir)
				done <- st
			}()
			waitFile(t, filepath.Join(dir, "started"))
			require.NoError(t, c.Del(t.Context(), "job").Err(), "the lock disappears under the holder")
			select {
			case st := <-done:
				assert.Equal(t, exitLost, st, errs)
			case <-time.After(30 * time.Second): // a watchdog against a hang, not a timing claim
				t.Fatal("the command was not stopped after the lock was lost")
			}
		})
	}
}

// TestRunInterruptedStopsTheCommand cancels run's context, as SIGINT or
// SIGTERM to redlock run does: the command gets SIGTERM, its status is
// reported, and the lock is released.
func TestRunInterruptedStopsTheCommand(t *testing.T) {
	addr, c := oneMaster(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		var out bytes.Buffer
		done <- runWith(ctx, []string{"--addrs", addr, "--key", "job", "--", "sh", "-c", `touch "$0/started"; exec sleep 60`, dir},
			strings.NewReader(""), &out, &out, func(string) (string, bool) { return "", false })
	}()
	waitFile(t, filepath.Join(dir, "started"))
	cancel()
	select {
	case st := <-done:
		assert.Equal(t, 128+15, st, "the command's own status: ended by SIGTERM")
	case <-time.After(30 * time.Second): // a watchdog against a hang, not a timing claim
		t.Fatal("the command was not stopped after run was interrupted")
	}
	n, err := c.Exists(t.Context(), "job").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lock is released after an interruption")
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear", path)
}

// TestRunInterruptedWhileWaiting cancels run while it waits for a held
// lock: the command never runs, and the status says interrupted, not busy.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	addr, c := oneMaster(t)
	s, err := redlock.NewSingle(adapt(t, c), redlock.WithTTL(30*time.Second), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	held, err := s.Lock(t.Context(), "job")
	require.NoError(t, err)
	defer held.Unlock(context.Background())

	marker := filepath.Join(t.TempDir(), "ran")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	go func() {
		var out bytes.Buffer
		done <- runWith(ctx, []string{"--addrs", addr, "--key", "job", "--wait", "1m", "--", "touch", marker},
			strings.NewReader(""), &out, &out, func(string) (string, bool) { return "", false })
	}()
	time.Sleep(100 * time.Millisecond) // let it start waiting; either way it must not run
	cancel()
	select {
	case st := <-done:
		assert.Equal(t, exitInterrupted, st)
	case <-time.After(30 * time.Second): // a watchdog against a hang, not a timing claim
		t.Fatal("run did not return after being interrupted")
	}
	assert.NoFileExists(t, marker)
}

// adapt is goredis.New for a client the test knows to be valid.
func adapt(t *testing.T, c *redis.Client) driver.Node {
	t.Helper()
	b, err := goredis.New(c)
	require.NoError(t, err)
	return b
}
