//go:build !linux

package goredis

import (
	"syscall"
	"time"
)

const canPoll = false

func pollReadable(syscall.RawConn, time.Time) bool { return false }
