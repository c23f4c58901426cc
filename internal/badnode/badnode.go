// Package badnode is the tests' fake node that answers garbage: a TCP
// server speaking just enough RESP for go-redis and rueidis to connect,
// which then answers every other command with a malformed or unexpected
// reply, one Shape per server. Tests point an adapter at it to prove that
// a bad node costs its vote, never the process.
//
// # Handshake
//
// HELLO is answered with a valid RESP3 map (proto 3, standalone master),
// so both clients speak RESP3 and read RESP3 types; CLIENT (SETINFO,
// SETNAME, TRACKING, MAINT_NOTIFICATIONS...), SELECT, AUTH and READONLY
// with +OK, PING with +PONG, QUIT with +OK and a close.
//
// # Everything else
//
// EVALSHA, EVAL, SCRIPT, WAIT, SUBSCRIBE, PUBLISH, TIME, INFO, CLUSTER and
// any other command get the server's Shape (Shape's constants say what
// each writes, and what the connection does after), or, after Answer,
// the given bytes. Commands counts them.
//
// # Lifetime
//
// Start listens on 127.0.0.1:0 and registers a t.Cleanup that closes the
// listener and every connection and waits for every goroutine the server
// started. A connection that went silent keeps reading (and discarding)
// what the client sends until the client or the cleanup closes it.
package badnode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Shape is what the server answers to a command outside the handshake.
type Shape int

// The shapes. Each writes its reply, then serves the connection's next
// command, unless it says otherwise.
const (
	HugeBulk        Shape = iota // $9223372036854775807: a bulk string of 2^63-1 bytes, none following
	HugeArray                    // *9223372036854775807: an array of 2^63-1 elements, none following
	NegativeLength               // $-5: a length below -1
	TruncatedClose               // half a bulk string, then the connection closes
	TruncatedSilent              // half a bulk string, then silence
	StringReply                  // a bulk string where the scripts send an integer or an array
	WrongArity                   // an array of five integers where the scripts send one, two or three
	NestedArrays                 // arrays in arrays
	HugeInteger                  // :99999999999999999999999, beyond int64
	BadInteger                   // :12x, not a number
	RESP3Null                    // _
	RESP3Double                  // ,inf
	RESP3Boolean                 // #t
	RESP3BigNumber               // (123456789012345678901234567890
	RESP3Verbatim                // =15 txt:hello world
	RESP3Set                     // ~2 of integers
	RESP3Map                     // %1 of integers
	RESP3Attribute               // |1 attribute, then a bulk string
	RESP3Push                    // >3 push message, and no reply after it
	UnknownType                  // @ is no RESP type
	EndlessLine                  // 1 MiB without CRLF, then silence
	Unsolicited                  // two replies to every command: a stale one before the real one
	Silence                      // no answer at all

	numShapes int = iota
)

// after is what a connection does once it wrote its reply.
type after uint8

const (
	serve   after = iota // read the next command
	silence              // read and discard until closed
	hangUp               // close the connection
)

// endless is EndlessLine's size: bounded, so the server's write ends.
const endless = 1 << 20

var shapes = [numShapes]struct {
	name  string
	reply string
	then  after
}{
	HugeBulk:        {"HugeBulk", "$9223372036854775807\r\n", silence},
	HugeArray:       {"HugeArray", "*9223372036854775807\r\n", silence},
	NegativeLength:  {"NegativeLength", "$-5\r\nabc\r\n", serve},
	TruncatedClose:  {"TruncatedClose", "$10\r\nabc", hangUp},
	TruncatedSilent: {"TruncatedSilent", "$10\r\nabc", silence},
	StringReply:     {"StringReply", "$7\r\ngarbage\r\n", serve},
	WrongArity:      {"WrongArity", "*5\r\n:7\r\n:7\r\n:7\r\n:7\r\n:7\r\n", serve},
	NestedArrays:    {"NestedArrays", "*2\r\n*1\r\n*1\r\n:1\r\n*0\r\n", serve},
	HugeInteger:     {"HugeInteger", ":99999999999999999999999\r\n", serve},
	BadInteger:      {"BadInteger", ":12x\r\n", serve},
	RESP3Null:       {"RESP3Null", "_\r\n", serve},
	RESP3Double:     {"RESP3Double", ",inf\r\n", serve},
	RESP3Boolean:    {"RESP3Boolean", "#t\r\n", serve},
	RESP3BigNumber:  {"RESP3BigNumber", "(123456789012345678901234567890\r\n", serve},
	RESP3Verbatim:   {"RESP3Verbatim", "=15\r\ntxt:hello world\r\n", serve},
	RESP3Set:        {"RESP3Set", "~2\r\n:7\r\n:8\r\n", serve},
	RESP3Map:        {"RESP3Map", "%1\r\n:7\r\n:8\r\n", serve},
	RESP3Attribute:  {"RESP3Attribute", "|1\r\n+key\r\n+value\r\n$7\r\ngarbage\r\n", serve},
	RESP3Push:       {"RESP3Push", ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\np\r\n", serve},
	UnknownType:     {"UnknownType", "@what\r\n", serve},
	EndlessLine:     {"EndlessLine", "", silence}, // written by serveConn
	Unsolicited:     {"Unsolicited", "$5\r\nstale\r\n$7\r\ngarbage\r\n", serve},
	Silence:         {"Silence", "", silence},
}

// Shapes returns every shape, in order: one test row each.
func Shapes() []Shape {
	all := make([]Shape, numShapes)
	for i := range all {
		all[i] = Shape(i)
	}
	return all
}

func (s Shape) String() string {
	if s < 0 || int(s) >= numShapes {
		return "Shape(" + strconv.Itoa(int(s)) + ")"
	}
	return shapes[s].name
}

// Bytes returns the reply s writes to a command (EndlessLine's first
// bytes only): a fuzz corpus's seed.
func (s Shape) Bytes() []byte {
	if s == EndlessLine {
		return bytes.Repeat([]byte("x"), 64)
	}
	return []byte(shapes[s].reply)
}

// hello is the reply to HELLO: a RESP3 map, as Redis 7 sends it.
const hello = "%7\r\n" +
	"$6\r\nserver\r\n$5\r\nredis\r\n" +
	"$7\r\nversion\r\n$5\r\n7.2.0\r\n" +
	"$5\r\nproto\r\n:3\r\n" +
	"$2\r\nid\r\n:1\r\n" +
	"$4\r\nmode\r\n$10\r\nstandalone\r\n" +
	"$4\r\nrole\r\n$6\r\nmaster\r\n" +
	"$7\r\nmodules\r\n*0\r\n"

// Server is a running bad node.
type Server struct {
	ln       net.Listener
	shape    Shape
	rude     bool                   // the handshake gets the shape too
	answer   atomic.Pointer[[]byte] // set by Answer: replaces the shape
	commands atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start starts a bad node answering with shape, stopped when t ends.
func Start(t testing.TB, shape Shape) *Server {
	t.Helper()
	return start(t, shape, false)
}

// StartRude starts a bad node that answers the handshake too (HELLO,
// CLIENT, PING...) with shape: no client ever gets a sound connection.
// Commands counts every command.
func StartRude(t testing.TB, shape Shape) *Server {
	t.Helper()
	return start(t, shape, true)
}

func start(t testing.TB, shape Shape, rude bool) *Server {
	t.Helper()
	if shape < 0 || int(shape) >= numShapes {
		t.Fatalf("badnode: unknown %v", shape)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("badnode: %v", err)
	}
	s := &Server{ln: ln, shape: shape, rude: rude, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's "host:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shape is the shape the server was started with.
func (s *Server) Shape() Shape { return s.shape }

// Answer makes the server answer every later command outside the
// handshake with b, instead of its shape, and then serve the next one.
// It is safe to call while clients are connected (a fuzz target swaps the
// bytes between iterations); nil restores the shape.
func (s *Server) Answer(b []byte) {
	if b == nil {
		s.answer.Store(nil)
		return
	}
	b = bytes.Clone(b)
	s.answer.Store(&b)
}

// Commands returns how many commands outside the handshake the server
// received: a test checks that its calls reached the garbage.
func (s *Server) Commands() int64 { return s.commands.Load() }

// Close stops the server: it closes the listener and every connection and
// waits for its goroutines. Start registers it with t.Cleanup; calling it
// again does nothing.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	_ = s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn answers c's commands until c closes or the shape hangs up.
func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		if reply, ok := handshake(args); ok && !s.rude {
			if _, err := io.WriteString(c, reply); err != nil || strings.EqualFold(args[0], "quit") {
				return
			}
			continue
		}
		s.commands.Add(1)
		reply, then := s.replyFor()
		if _, err := c.Write(reply); err != nil {
			return
		}
		switch then {
		case silence:
			_, _ = io.Copy(io.Discard, r)
			return
		case hangUp:
			return
		}
	}
}

// replyFor returns the bytes to write for a command and what to do after.
func (s *Server) replyFor() ([]byte, after) {
	if b := s.answer.Load(); b != nil {
		return *b, serve
	}
	if s.shape == EndlessLine {
		return bytes.Repeat([]byte("x"), endless), silence
	}
	sh := shapes[s.shape]
	return []byte(sh.reply), sh.then
}

// handshake returns the reply to a command of the handshake, if args is one.
func handshake(args []string) (string, bool) {
	switch strings.ToLower(args[0]) {
	case "hello":
		return hello, true
	case "client", "select", "auth", "readonly", "quit":
		return "+OK\r\n", true
	case "ping":
		return "+PONG\r\n", true
	}
	return "", false
}

// maxArg bounds an argument the server reads (a script's source is a few
// KiB).
const maxArg = 1 << 20

var errProtocol = errors.New("badnode: not a RESP command")

// readCommand reads one command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	n, err := readLength(r, '*')
	if err != nil {
		return nil, err
	}
	if n < 1 || n > 1<<16 {
		return nil, fmt.Errorf("%w: %d arguments", errProtocol, n)
	}
	args := make([]string, n)
	for i := range args {
		size, err := readLength(r, '$')
		if err != nil {
			return nil, err
		}
		if size < 0 || size > maxArg {
			return nil, fmt.Errorf("%w: an argument of %d bytes", errProtocol, size)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// readLength reads a line "<prefix><integer>\r\n".
func readLength(r *bufio.Reader, prefix byte) (int, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if len(line) < 2 || line[0] != prefix {
		return 0, fmt.Errorf("%w: %q", errProtocol, line)
	}
	return strconv.Atoi(line[1:])
}
