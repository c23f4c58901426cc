// Package respguard stands between a Redis client library and its
// connection and refuses, on the wire, what no Redis server sends: a
// length beyond a bound or below -1, a byte that is no RESP type, and a
// reply to no command. A client library trusts the stream: go-redis
// allocates any length it reads (a length of 2^40 ends the process out
// of memory), rueidis panics on its own goroutine at a reply it did not
// expect. Behind the guard such a stream ends the connection with an
// *Error, which the client reports as that command's failure.
//
// The guard reads framing only (type bytes and lengths), allocates
// nothing per read or write, and costs one uncontended mutex per call.
package respguard

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Limits bound what one reply may announce.
type Limits struct {
	MaxBulk     int64 // bytes in one string
	MaxElements int64 // elements in one array, set or push; pairs in a map
}

// Default allows what a Redis server allows: strings up to 512 MiB, its
// default proto-max-bulk-len, and 2^24 elements in one aggregate (an
// allocation of 256 MiB in go-redis). The library's own replies are a
// few elements of a few bytes.
var Default = Limits{MaxBulk: 512 << 20, MaxElements: 1 << 24}

// Error is the refusal of a stream. The connection is closed; every
// later read and write on it returns the same *Error.
type Error struct {
	What string // what the node sent, as "the length -5"
}

func (e *Error) Error() string {
	return "the node sent " + e.What + ", which no Redis server sends; the connection is closed"
}

func refusal(format string, args ...any) *Error {
	return &Error{What: fmt.Sprintf(format, args...)}
}

// Conn returns c behind the guard. Reads are checked before the client
// sees them; writes are followed to know how many replies are owed.
// When c is a syscall.Conn the result is one too, so a client that
// peeks at the socket for health (go-redis) still can.
func Conn(c net.Conn, l Limits) net.Conn {
	g := &conn{Conn: c}
	g.in = parser{limits: l, seen: (*replies)(g), argAt: -1}
	g.out = parser{limits: unlimited, seen: (*requests)(g), capture: true, argAt: -1}
	g.counting = true
	if sc, ok := c.(syscall.Conn); ok {
		return &sysConn{conn: g, sys: sc}
	}
	return g
}

// unlimited is for the client's own requests: the guard follows them
// and never refuses one.
var unlimited = Limits{MaxBulk: 1<<63 - 3, MaxElements: 1 << 62}

type conn struct {
	net.Conn

	mu  sync.Mutex
	err error
	in  parser // the node's replies
	out parser // the client's requests

	// owed are the replies the node owes, oldest first, from owed[head].
	owed []owedReply
	head int
	// counting is false once the connection entered a mode where the
	// node speaks unasked (MONITOR, CLIENT REPLY, RESP2 subscriptions).
	counting bool
	resp3    bool
	current  owedReply // what the reply being read answers
	failed   bool      // the reply being read is an error
}

// owedReply is one request, or a run of subscriptions (n of them) whose
// answers are pushes unless they fail.
type owedReply struct {
	kind uint8
	n    int
}

const (
	plain uint8 = iota
	subscription
	hello2
	hello3
)

type sysConn struct {
	*conn
	sys syscall.Conn
}

func (c *sysConn) SyscallConn() (syscall.RawConn, error) { return c.sys.SyscallConn() }

func (c *conn) Read(b []byte) (int, error) {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, rerr := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if c.err == nil {
			if perr := c.in.feed(b[:n]); perr != nil {
				c.err = perr
			}
		}
		err = c.err
		c.mu.Unlock()
		if err != nil {
			c.Conn.Close()
			return 0, err
		}
	}
	return n, rerr
}

func (c *conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	err := c.err
	if err == nil && c.counting {
		if c.out.feed(b) != nil {
			c.counting = false // not RESP requests: follow no more
		}
	}
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// requests hears the client's commands.
type requests conn

func (r *requests) start(byte) error { return nil }

func (r *requests) end() {
	c := (*conn)(r)
	switch string(upper(c.out.arg(0))) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE":
		if !c.resp3 {
			c.counting = false // RESP2: messages come as replies
			return
		}
		c.owe(subscription)
	case "MONITOR", "SYNC", "PSYNC", "RESET":
		c.counting = false
	case "CLIENT":
		if bytes.EqualFold(c.out.arg(1), []byte("REPLY")) {
			c.counting = false
			return
		}
		c.owe(plain)
	case "HELLO":
		if string(c.out.arg(1)) == "3" {
			c.owe(hello3)
		} else {
			c.owe(hello2)
		}
	default:
		c.owe(plain)
	}
}

func (c *conn) owe(kind uint8) {
	if c.head == len(c.owed) {
		c.owed, c.head = c.owed[:0], 0
	}
	if n := len(c.owed); kind == subscription && n > c.head && c.owed[n-1].kind == subscription {
		c.owed[n-1].n++
		return
	}
	c.owed = append(c.owed, owedReply{kind: kind, n: 1})
}

// replies hears the node's replies.
type replies conn

func (r *replies) start(kind byte) error {
	c := (*conn)(r)
	if kind == '>' || kind == '|' || !c.counting {
		c.current, c.failed = owedReply{kind: plain}, false
		return nil
	}
	failed := kind == '-' || kind == '!'
	c.failed = failed
	for c.head < len(c.owed) {
		o := &c.owed[c.head]
		if o.kind != subscription {
			c.current = *o
			c.head++
			return nil
		}
		// Subscriptions are answered by pushes; an error is the answer of
		// one of them. A reply that is no error means they were answered.
		if !failed {
			c.head++
			continue
		}
		if o.n--; o.n == 0 {
			c.head++
		}
		c.current = owedReply{kind: subscription}
		return nil
	}
	return refusal("a reply (%q) to no command", kind)
}

func (r *replies) end() {
	c := (*conn)(r)
	if !c.failed {
		switch c.current.kind {
		case hello2:
			c.resp3 = false
		case hello3:
			c.resp3 = true
		}
	}
	c.current, c.failed = owedReply{}, false
}

// upper upper-cases ASCII letters of b in place.
func upper(b []byte) []byte {
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return b
}
