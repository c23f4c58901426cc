package badnode

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// The handshake is answered, then every other command with the shape, and
// Close ends a connection left silent.
func TestServerAnswersHandshakeThenShape(t *testing.T) {
	s := Start(t, HugeBulk)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	read := func(n int) string {
		t.Helper()
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	_, _ = io.WriteString(c, "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n")
	if got := read(len(hello)); got != hello {
		t.Fatalf("HELLO: %q", got)
	}
	_, _ = io.WriteString(c, "*1\r\n$4\r\nPING\r\n")
	if got := read(7); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	_, _ = io.WriteString(c, "*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n0\r\n")
	if got, want := read(len(HugeBulk.Bytes())), string(HugeBulk.Bytes()); got != want {
		t.Fatalf("EVALSHA: %q, want %q", got, want)
	}
	if s.Commands() != 1 {
		t.Fatalf("Commands() = %d, want 1", s.Commands())
	}
	s.Close() // the connection is silent now: Close ends it
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a byte after Close")
	}
}

// Answer replaces the shape's reply.
func TestServerAnswer(t *testing.T) {
	s := Start(t, Silence)
	s.Answer([]byte(":1\r\n"))
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "*1\r\n$4\r\nTIME\r\n*1\r\n$4\r\nTIME\r\n")
	b := make([]byte, 8)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != ":1\r\n:1\r\n" {
		t.Fatalf("got %q, %v", b, err)
	}
}
