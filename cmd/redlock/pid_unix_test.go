//go:build unix

package main

import (
	"errors"
	"syscall"
)

// pidGone reports whether no process (not even a zombie) has this PID.
func pidGone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
