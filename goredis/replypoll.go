package goredis

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// Polling for a reply (WithReplyPoll). A lone caller writes its command
// and reads the reply; if the reply is not there yet, Go parks the
// goroutine, its thread goes idle, and the reply has to wake it. Where
// client and server run on different cores of a virtual machine, that
// wake-up costs more than the server's work: on the test machine a
// loopback round trip took about 60 µs when the reply woke the client,
// and about 25 µs when the client was still looking (BENCHMARKS.md,
// "Polling for the reply"). So a lone caller that is the only goroutine
// of its process waiting for a node looks for the reply for up to the
// poll time first, yielding its core to other threads between looks (to
// the server's, when they share a core), and only then parks.
//
// It adapts, so that a node farther away than the poll time costs next
// to no CPU: a look that runs out makes the connection skip its next 1,
// 2, 4 ... up to maxPollSkip lone calls, and a reply found within it ends
// the skipping. It never looks when another goroutine of the process
// waits for a node (the CPU is better left to it), with GOMAXPROCS 1 (as
// it was when the connection was dialled), on a connection that is not a
// socket (a TLS connection, say), or off Linux and on linux/386 (whose
// socket calls go through socketcall).
const (
	defaultReplyPoll = 50 * time.Microsecond
	maxReplyPoll     = time.Millisecond // WithReplyPoll's most
	maxPollSkip      = 64
)

// waiting counts this process's goroutines waiting for a wire's reply:
// lone callers reading theirs and queued callers waiting for the sender.
var waiting atomic.Int32

// poller is a wire connection's state of polling (owned, as the
// connection, by whoever set busy).
type poller struct {
	rc     syscall.RawConn // nil: never poll
	d      time.Duration   // how long one look lasts at most
	misses int             // looks in a row that ran out
	skip   int             // lone calls left to skip

	// One look, run by rc.Read: look is p.peek, made once per
	// connection, so that a look allocates nothing.
	look  func(fd uintptr) bool
	end   time.Time // when the look gives up
	found bool      // the look found something to read
	b     [1]byte   // where it peeks
}

// reset readies p for a new connection conn, looking for up to d (0:
// never).
func (p *poller) reset(conn any, d time.Duration) {
	*p = poller{}
	sc, ok := conn.(syscall.Conn)
	if !ok || !canPoll || d <= 0 || runtime.GOMAXPROCS(0) < 2 {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.rc, p.d, p.look = rc, d, p.peek
}

// await looks for a reply for up to p.d, and not past until (the read's
// deadline; zero for none), unless the policy above says not to; the
// read that follows finds it, or parks.
func (p *poller) await(until time.Time) {
	if p.rc == nil {
		return
	}
	if p.skip > 0 {
		p.skip--
		return
	}
	if waiting.Load() > 1 {
		return
	}
	p.end, p.found = time.Now().Add(p.d), false
	if !until.IsZero() && until.Before(p.end) {
		p.end = until
	}
	if err := p.rc.Read(p.look); err == nil && p.found {
		p.misses = 0
		return
	}
	p.misses = min(max(2*p.misses, 1), maxPollSkip)
	p.skip = p.misses
}
