//go:build linux && !386

package goredis

import (
	"syscall"
	"time"
	"unsafe"
)

const canPoll = true

// peek, run by rc.Read, looks at the socket without blocking, yielding
// the core between looks, until it has something to read (a reply, its
// end, or an error: p.found) or p.end passes. It always returns true:
// rc.Read never waits.
func (p *poller) peek(fd uintptr) bool {
	for {
		_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p.b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if errno != syscall.EAGAIN && errno != syscall.EINTR {
			p.found = true
			return true
		}
		if !time.Now().Before(p.end) {
			return true
		}
		// Through the runtime (not RawSyscall), so that a yield that
		// lasts (another thread's time slice) lets the scheduler hand
		// this P to other goroutines, and a GC need not wait for it.
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}
