//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup puts the child in a process group of its own, whose id is its
// PID, so that signalGroup reaches it and everything it started, and a
// Ctrl-C on the terminal reaches only this command.
func ownGroup(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Setpgid = true
}

// signalGroup sends sig to the child's whole process group.
func signalGroup(c *exec.Cmd, sig syscall.Signal) error {
	return syscall.Kill(-c.Process.Pid, sig)
}
