package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunKilledTakesTheCommandAlong SIGKILLs a built redlock run, which
// can clean nothing up: the command must die too, or it would go on
// without anyone renewing its lock.
func TestRunKilledTakesTheCommandAlong(t *testing.T) {
	addr, _ := oneMaster(t)
	dir := t.TempDir()
	bin := buildRedlock(t)

	pidFile := filepath.Join(dir, "pid")
	cmd := exec.Command(bin, "run", "--addrs", addr, "--key", "job", "--", "sh", "-c", `echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; exec sleep 60`, pidFile)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	waitFile(t, pidFile)
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	defer syscall.Kill(pid, syscall.SIGKILL) // in case the test fails

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	for deadline := time.Now().Add(20 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) { // a watchdog, not a timing claim
			t.Fatalf("the command (pid %d) outlived redlock run", pid)
		}
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
