package goredis

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// RESP2, the little of it that the node's own connection (wire.go) needs:
// an encoder that appends a command to a reused buffer, and a reader of
// the replies the lock commands get (+OK, $-1, :n, -ERR ...), which
// allocates nothing for any of them but an error reply.

// appendArray appends the header of a command of n arguments.
func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendBulk appends one argument.
func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendBulkInt appends an integer argument, in decimal.
func appendBulkInt(b []byte, n int64) []byte {
	var digits [20]byte
	d := strconv.AppendInt(digits[:0], n, 10)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(d)), 10)
	b = append(b, '\r', '\n')
	b = append(b, d...)
	return append(b, '\r', '\n')
}

// respError is an error reply of the node ("-NOSCRIPT ...", "-READONLY
// ..."). It is a redis.Error, so redis.HasErrorPrefix and everything else
// in the adapter that recognises go-redis's error replies recognises it.
type respError string

func (e respError) Error() string { return string(e) }

// RedisError marks respError as a redis.Error.
func (respError) RedisError() {}

// errProtocol is the error (wrapped) of a reply that is not what the
// command gets: the connection is closed, its stream no longer trusted.
var errProtocol = errors.New("goredis: unexpected reply")

// reply kinds, as readReply reports them.
const (
	replyStatus = '+' // +OK: ok is set
	replyNil    = '_' // $-1 or *-1: neither set
	replyInt    = ':' // :n: n is set
	replyBulk   = '$' // $len: the string is returned (a fair release's unannounced grant)
)

// maxBulk bounds a bulk string reply: the lock scripts return short ones
// only (a grant: a ticket and a token).
const maxBulk = 1024

// readReply reads one reply of the lock commands: a status (+OK), a nil
// ($-1, *-1), an integer (:n), a bulk string of at most maxBulk bytes
// (bulk), or an error reply, returned as a respError with the connection
// still in step (the reply was read whole). Any other reply (an array,
// a longer string, ...), a malformed one or a read error is fatal: the
// stream is out of step, and the caller must close the connection.
func readReply(r *bufio.Reader) (kind byte, n int64, bulk string, err error, fatal bool) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = fmt.Errorf("%w: a reply line longer than %d bytes", errProtocol, r.Size())
		}
		return 0, 0, "", err, true
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, 0, "", fmt.Errorf("%w: %q", errProtocol, line), true
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return replyStatus, 0, "", nil, false
	case '-':
		return 0, 0, "", respError(body), false
	case ':':
		v, ok := parseInt(body)
		if !ok {
			return 0, 0, "", fmt.Errorf("%w: integer %q", errProtocol, body), true
		}
		return replyInt, v, "", nil, false
	case '$', '*':
		v, ok := parseInt(body)
		if !ok {
			return 0, 0, "", fmt.Errorf("%w: length %q", errProtocol, body), true
		}
		if v < 0 {
			return replyNil, 0, "", nil, false
		}
		if line[0] == '$' && v <= maxBulk {
			b, err := r.Peek(int(v) + 2)
			if err != nil {
				return 0, 0, "", err, true
			}
			if b[v] != '\r' || b[v+1] != '\n' {
				return 0, 0, "", fmt.Errorf("%w: bulk string of %d bytes not ended by CRLF", errProtocol, v), true
			}
			bulk = string(b[:v])
			_, _ = r.Discard(int(v) + 2)
			return replyBulk, 0, bulk, nil, false
		}
		return 0, 0, "", fmt.Errorf("%w: %q", errProtocol, bytes.TrimSpace(line)), true
	}
	return 0, 0, "", fmt.Errorf("%w: %q", errProtocol, bytes.TrimSpace(line)), true
}

// parseInt parses a RESP integer without allocating.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n < 0 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	return n, true
}
