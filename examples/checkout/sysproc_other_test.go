//go:build unix && !linux

package main

import "syscall"

// setProcAttr puts a test server in a process group of its own. Outside
// Linux there is no parent-death signal: a server outlives a test binary
// killed before its cleanup ran.
func setProcAttr(a *syscall.SysProcAttr) { a.Setpgid = true }
