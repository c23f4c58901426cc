//go:build !linux

package main

import "os/exec"

// dieWithUs does nothing outside Linux: a child of a process killed by
// SIGKILL keeps running (for redlock run, the lock then expires within
// the TTL while the command may still run).
func dieWithUs(*exec.Cmd) {}
