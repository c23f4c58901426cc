package goredis

import (
	"syscall"
	"time"
	"unsafe"
)

const canPoll = true

// pollReadable reports whether rc's socket has something to read (a
// reply, its end, or an error) before end, looking without blocking and
// yielding the core between looks.
func pollReadable(rc syscall.RawConn, end time.Time) bool {
	var b [1]byte
	found := false
	err := rc.Read(func(fd uintptr) bool {
		for {
			_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
				syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
			if errno != syscall.EAGAIN && errno != syscall.EINTR {
				found = true
				return true
			}
			if !time.Now().Before(end) {
				return true
			}
			syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		}
	})
	return found && err == nil
}
