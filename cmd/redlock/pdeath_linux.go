package main

import (
	"os/exec"
	"syscall"
)

// dieWithUs asks Linux to SIGKILL the child if this process dies first
// (PR_SET_PDEATHSIG), even by SIGKILL, when no deferred cleanup runs: a
// benchmark server must not outlive redlock bench, and a command must not
// outlive the redlock run that renews its lock.
func dieWithUs(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
