//go:build !unix

package main

import (
	"os/exec"
	"syscall"
)

// ownGroup does nothing where process groups do not exist.
func ownGroup(*exec.Cmd) {}

// signalGroup kills the child itself where process groups and SIGTERM do
// not exist: there is no grace period.
func signalGroup(c *exec.Cmd, _ syscall.Signal) error { return c.Process.Kill() }
