package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildRedlock builds the command into a temporary directory.
func buildRedlock(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "redlock")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// TestCommandsPrintOnlyTheirOwnWords points every subcommand of the built
// command at a closed port: each reports the failure in its own words,
// and none of go-redis's pool log lines ("redis: ... connection pool:
// failed to dial after 5 attempts") reaches stderr.
func TestCommandsPrintOnlyTheirOwnWords(t *testing.T) {
	bin := buildRedlock(t)
	port, err := freeport.Get() // free: nothing listens on it
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for _, tt := range []struct {
		args   []string
		status int
	}{
		{[]string{"run", "--addrs", addr, "--key", "k", "--", "true"}, exitUnavailable},
		{[]string{"inspect", "--addrs", addr, "--key", "k"}, exitUnavailable},
		{[]string{"inspect", "--addrs", addr, "--prefix", "k"}, exitUnavailable},
		{[]string{"release", "--addrs", addr, "--key", "k", "--token", "t"}, exitUnavailable},
		{[]string{"release", "--addrs", addr, "--key", "k", "--force"}, exitUnavailable},
		{[]string{"demo", "--addrs", addr}, exitFailure},
		{[]string{"bench", "--addrs", addr, "--nodes", "1", "--duration", "50ms"}, exitFailure},
	} {
		var out, errb bytes.Buffer
		cmd := exec.Command(bin, tt.args...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		assert.Equal(t, tt.status, cmd.ProcessState.ExitCode(), "%v: %s%s", tt.args, out.String(), errb.String())
		assert.Contains(t, out.String()+errb.String(), "connection refused", "%v reports the failure itself", tt.args)
		for line := range strings.SplitSeq(errb.String(), "\n") {
			assert.False(t, strings.HasPrefix(line, "redis:"), "%v printed go-redis's %q", tt.args, line)
			assert.NotContains(t, line, "connection pool", "%v", tt.args)
		}
	}
}
