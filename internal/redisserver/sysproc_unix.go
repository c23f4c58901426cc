//go:build unix && !linux

package redisserver

import (
	"os/exec"
	"syscall"
)

// setSysProcAttr puts redis-server in a process group of its own when
// ownGroup is set. Outside Linux there is no PR_SET_PDEATHSIG: a server
// outlives a process killed before it could call Stop.
func setSysProcAttr(cmd *exec.Cmd, ownGroup bool) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
}
