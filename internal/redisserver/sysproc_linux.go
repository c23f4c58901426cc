//go:build linux

package redisserver

import (
	"os/exec"
	"syscall"
)

// setSysProcAttr asks the kernel to SIGKILL redis-server if the test process
// dies without running its cleanups (e.g. a panic or a timeout kill).
func setSysProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
