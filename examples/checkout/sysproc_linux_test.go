//go:build linux

package main

import "syscall"

// setProcAttr puts a test server in a process group of its own and asks
// the kernel to SIGKILL it when the test binary dies without stopping it
// (a panic, a timeout, a SIGKILL).
func setProcAttr(a *syscall.SysProcAttr) {
	a.Setpgid = true
	a.Pdeathsig = syscall.SIGKILL
}
