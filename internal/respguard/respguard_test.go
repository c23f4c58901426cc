package respguard

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wire is the connection under the guard: Read hands out what the node
// "sent" at most chunk bytes at a time, Write records what the client
// sent.
type wire struct {
	net.Conn
	in     []byte
	read   int
	chunk  int
	out    bytes.Buffer
	closed bool
}

func (w *wire) Read(b []byte) (int, error) {
	rest := w.in[w.read:]
	if len(rest) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), w.chunk)], rest)
	w.read += n
	return n, nil
}

func (w *wire) Write(b []byte) (int, error) { return w.out.Write(b) }
func (w *wire) Close() error                { w.closed = true; return nil }

// step is the client writing a request (w) or the node sending bytes
// that the client then reads in full (r).
type step struct{ w, r string }

func cmd(args ...string) step {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return step{w: b.String()}
}

func reply(s string) step { return step{r: s} }

// play runs the steps through a guard whose node delivers chunk bytes
// per read, and returns the first error.
func play(steps []step, chunk int) (*wire, error) {
	w := &wire{chunk: chunk}
	g := Conn(w, Default)
	for _, s := range steps {
		if s.w != "" {
			if _, err := g.Write([]byte(s.w)); err != nil {
				return w, err
			}
		}
		if s.r != "" {
			w.in = append(w.in, s.r...)
			if _, err := io.ReadFull(g, make([]byte, len(s.r))); err != nil {
				return w, err
			}
		}
	}
	return w, nil
}

// hello3 is go-redis's and rueidis's greeting, answered.
var greeting = []step{cmd("HELLO", "3"), reply("%1\r\n$5\r\nproto\r\n:3\r\n")}

func conversation(steps ...step) []step { return append(append([]step{}, greeting...), steps...) }

// Every stream a Redis server sends passes, in pieces of any size.
func TestSoundStreamsPass(t *testing.T) {
	cases := map[string][]step{
		"scalars": conversation(
			cmd("SET", "k", "v"), reply("+OK\r\n"),
			cmd("GET", "k"), reply("$1\r\nv\r\n"),
			cmd("GET", "none"), reply("_\r\n"),
			cmd("INCR", "k"), reply("-ERR value is not an integer\r\n"),
			cmd("EVALSHA", "x", "0"), reply(":123456789012345678\r\n"),
			cmd("X"), reply(",3.14\r\n"), cmd("X"), reply("#t\r\n"), cmd("X"), reply("(123456789012345678901234567890\r\n"),
			cmd("X"), reply("=15\r\ntxt:hello world\r\n"), cmd("X"), reply("!3\r\nERR\r\n"),
		),
		"aggregates": conversation(
			cmd("EVALSHA", "x", "1", "k"), reply("*3\r\n:1\r\n$2\r\nab\r\n*2\r\n_\r\n*0\r\n"),
			cmd("HGETALL", "h"), reply("%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n"),
			cmd("SMEMBERS", "s"), reply("~2\r\n:1\r\n:2\r\n"),
			cmd("HGETALL", "none"), reply("%0\r\n"),
		),
		"resp2 nulls": {cmd("GET", "k"), reply("$-1\r\n"), cmd("LRANGE", "k"), reply("*-1\r\n"), cmd("X"), reply("*2\r\n$-1\r\n*-1\r\n")},
		"pushes between and before replies": conversation(
			reply(">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"),
			cmd("GET", "k"), reply(">2\r\n$4\r\nnote\r\n:1\r\n$1\r\nv\r\n"),
		),
		"attributes": conversation(
			cmd("GET", "k"), reply("|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n"),
			cmd("MGET", "a"), reply("*1\r\n|1\r\n+key-popularity\r\n%0\r\n:2\r\n"),
			cmd("GET", "k"), reply("|0\r\n+OK\r\n"),
		),
		"pipelined": conversation(cmd("SET", "a", "1"), cmd("SET", "b", "2"), cmd("GET", "a"), reply("+OK\r\n+OK\r\n$1\r\n1\r\n")),
		"resp3 subscriptions": conversation(
			cmd("SUBSCRIBE", "a", "b"), reply(">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n>3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"),
			reply(">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n"),
			cmd("PING"), reply("+PONG\r\n"),
			cmd("subscribe", "x"), cmd("SUBSCRIBE", "y"), reply("-NOPERM x\r\n-NOPERM y\r\n"),
			cmd("UNSUBSCRIBE"), cmd("GET", "k"), reply(">3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n$1\r\nv\r\n"),
		),
		"resp2 subscriptions": {
			cmd("SUBSCRIBE", "a"), reply("*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"),
			reply("*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n"), reply("*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nho\r\n"),
		},
		"hello 3 refused: resp2": {
			cmd("HELLO", "3"), reply("-NOPROTO unsupported\r\n"),
			cmd("SUBSCRIBE", "a"), reply("*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n"),
		},
		"monitor":      conversation(cmd("MONITOR"), reply("+OK\r\n+1 [0 1.2.3.4] \"GET\"\r\n+2\r\n")),
		"client reply": conversation(cmd("CLIENT", "reply", "off"), cmd("SET", "a", "1"), reply("+late\r\n")),
		"long lines":   conversation(cmd("X"), reply("+"+strings.Repeat("x", 1<<20)+"\r\n")),
		"a long name":  conversation(cmd(strings.Repeat("S", 40), "x"), reply("+OK\r\n")),
	}
	for name, steps := range cases {
		for _, chunk := range []int{1, 2, 3, 7, 64, 1 << 21} {
			_, err := play(steps, chunk)
			assert.NoError(t, err, "%s in pieces of %d", name, chunk)
		}
	}
}

// What no Redis server sends ends the connection with an *Error, before
// the client reads a byte of it.
func TestGarbageIsRefused(t *testing.T) {
	cases := map[string]struct {
		steps []step
		want  string
	}{
		"a string of 2^63-1 bytes":   {conversation(cmd("GET", "k"), reply("$9223372036854775807\r\n")), "a string of 9223372036854775807 bytes"},
		"an array of 2^63-1":         {conversation(cmd("GET", "k"), reply("*9223372036854775807\r\n")), "an aggregate of 9223372036854775807 elements"},
		"a map of 2^40 pairs":        {conversation(cmd("GET", "k"), reply("%1099511627776\r\n")), "an aggregate of 1099511627776"},
		"a nested array of 2^40":     {conversation(cmd("GET", "k"), reply("*1\r\n*1099511627776\r\n")), "an aggregate of 1099511627776"},
		"a length of -5":             {conversation(cmd("GET", "k"), reply("$-5\r\n")), "the length -5"},
		"twenty digits":              {conversation(cmd("GET", "k"), reply("$12345678901234567890\r\n")), "more than 19 digits"},
		"no digits":                  {conversation(cmd("GET", "k"), reply("*\r\n")), "without a length"},
		"a letter in a length":       {conversation(cmd("GET", "k"), reply("$1x\r\n")), "the byte 'x'"},
		"a CR inside a length":       {conversation(cmd("GET", "k"), reply("$1\r2\r\n")), "after a CR"},
		"a streamed string":          {conversation(cmd("GET", "k"), reply("$?\r\n")), "the byte '?'"},
		"no RESP type":               {conversation(cmd("GET", "k"), reply("@1\r\n")), "the type byte '@'"},
		"a reply before any command": {[]step{reply("+OK\r\n")}, "a reply ('+') to no command"},
		"a stale second reply":       {conversation(cmd("SET", "k", "v"), reply("+OK\r\n+OK\r\n")), "to no command"},
		"a second error to one subscription": {conversation(cmd("SUBSCRIBE", "x"),
			reply("-NOPERM x\r\n-NOPERM x\r\n")), "a reply ('-') to no command"},
		"a subscription answered, then a reply": {conversation(cmd("SUBSCRIBE", "x"),
			reply(">3\r\n$9\r\nsubscribe\r\n$1\r\nx\r\n:1\r\n:1\r\n")), "a reply (':') to no command"},
	}
	for name, c := range cases {
		for _, chunk := range []int{1, 5, 1 << 10} {
			w, err := play(c.steps, chunk)
			var refused *Error
			if assert.ErrorAs(t, err, &refused, "%s in pieces of %d", name, chunk) {
				assert.Contains(t, err.Error(), c.want, name)
				assert.True(t, w.closed, "%s: the connection is closed", name)
			}
		}
	}
}

// Once refused, a connection stays refused: no read or write reaches it.
func TestRefusalIsFinal(t *testing.T) {
	w := &wire{chunk: 1 << 10}
	g := Conn(w, Default)
	w.in = append(w.in, "+OK\r\n"...)
	_, err := g.Read(make([]byte, 16))
	var refused *Error
	require.ErrorAs(t, err, &refused)
	_, again := g.Read(make([]byte, 16))
	assert.Same(t, err, again)
	n, werr := g.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	assert.Zero(t, n)
	assert.Same(t, err, werr)
	assert.Empty(t, w.out.String(), "nothing written after the refusal")
}

// Limits are the caller's: a smaller bound refuses what Default allows.
func TestLimitsAreTheCallers(t *testing.T) {
	w := &wire{chunk: 64}
	g := Conn(w, Limits{MaxBulk: 4, MaxElements: 2})
	_, err := g.Write([]byte("*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)
	w.in = append(w.in, "$4\r\nPONG\r\n*3\r\n"...)
	_, err = io.ReadFull(g, make([]byte, 10))
	require.NoError(t, err, "a string at the bound passes")
	_, err = g.Read(make([]byte, 16))
	assert.ErrorContains(t, err, "an aggregate of 3 elements, over the limit of 2")
}

// A guarded TCP connection is still a syscall.Conn, so go-redis's health
// check can peek at the socket; a guarded opaque connection is not.
func TestSyscallConnIsKept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			time.Sleep(10 * time.Millisecond)
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, ok := Conn(c, Default).(syscall.Conn)
	assert.True(t, ok, "TCP")
	_, ok = Conn(&wire{}, Default).(syscall.Conn)
	assert.False(t, ok, "opaque")
}

// The guard allocates nothing per read or write.
func TestNoAllocations(t *testing.T) {
	assert.Zero(t, testing.AllocsPerRun(1000, scriptCall(t)))
}

// scriptCall returns one script call through a guard: an EVALSHA
// written, its two-integer reply read.
func scriptCall(tb testing.TB) func() {
	req := []byte("*5\r\n$7\r\nEVALSHA\r\n$40\r\n" + strings.Repeat("a", 40) + "\r\n$1\r\n1\r\n$14\r\nbench:lock:key\r\n$36\r\n" + strings.Repeat("t", 36) + "\r\n")
	rep := []byte("*2\r\n:1\r\n:17\r\n")
	w := &wire{chunk: 1 << 10}
	g := Conn(w, Default)
	buf := make([]byte, len(rep))
	return func() {
		w.in, w.read = append(w.in[:0], rep...), 0
		w.out.Reset()
		if _, err := g.Write(req); err != nil {
			tb.Fatal(err)
		}
		if _, err := io.ReadFull(g, buf); err != nil {
			tb.Fatal(err)
		}
	}
}

// Any bytes from a node: no panic, and the verdict does not depend on
// how the bytes were split into reads.
func FuzzReplies(f *testing.F) {
	f.Add([]byte("+OK\r\n"), uint8(2))
	f.Add([]byte("*2\r\n:1\r\n|1\r\n+a\r\n:1\r\n$3\r\nabc\r\n"), uint8(3))
	f.Add([]byte(">2\r\n$1\r\na\r\n%1\r\n_\r\n,1\r\n-ERR\r\n"), uint8(1))
	f.Add([]byte("$-1\r\n*-1\r\n$9223372036854775807\r\n"), uint8(4))
	f.Fuzz(func(t *testing.T, node []byte, commands uint8) {
		steps := []step{}
		for range commands % 8 {
			steps = append(steps, cmd("GET", "k"))
		}
		steps = append(steps, reply(string(node)))
		_, whole := play(steps, len(node)+1)
		_, bytewise := play(steps, 1)
		if (whole == nil) != (bytewise == nil) || (whole != nil && whole.Error() != bytewise.Error()) {
			t.Fatalf("whole: %v; byte by byte: %v", whole, bytewise)
		}
	})
}

// BenchmarkRoundTrip is the guard's cost on one script call.
func BenchmarkRoundTrip(b *testing.B) {
	call := scriptCall(b)
	b.ReportAllocs()
	for b.Loop() {
		call()
	}
}
