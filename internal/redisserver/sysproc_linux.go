//go:build linux

package redisserver

import (
	"os/exec"
	"syscall"
)

// setSysProcAttr asks the kernel to SIGKILL redis-server if the process
// that started it dies without stopping it (a panic, a test timeout, a
// SIGKILL), and puts it in a process group of its own when ownGroup is set.
func setSysProcAttr(cmd *exec.Cmd, ownGroup bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: ownGroup}
}
