package goredis

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestEncodeCommands(t *testing.T) {
	cases := []struct {
		name string
		cmd  command
		want string
	}{
		{"SET", command{op: opSet, key: "k", token: "tok", n: 1500},
			"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\ntok\r\n$2\r\nPX\r\n$4\r\n1500\r\n$2\r\nNX\r\n"},
		{"release", releaseCommand("key", "t", true),
			"*6\r\n$7\r\nEVALSHA\r\n$40\r\n" + releaseScript.sha + "\r\n$1\r\n1\r\n$3\r\nkey\r\n$1\r\nt\r\n$1\r\n1\r\n"},
		{"extend by EVAL", command{op: opScript, s: &extendScript, eval: true, key: "k", token: "t", n: 30000},
			"*6\r\n$4\r\nEVAL\r\n$" + strconv.Itoa(len(extendScript.src)) + "\r\n" + extendScript.src + "\r\n$1\r\n1\r\n$1\r\nk\r\n$1\r\nt\r\n$5\r\n30000\r\n"},
		{"transfer", transferCommand("k", "old", "new", 1500*time.Millisecond),
			"*8\r\n$7\r\nEVALSHA\r\n$40\r\n" + transferScript.sha + "\r\n$1\r\n2\r\n$1\r\nk\r\n$7\r\nk:queue\r\n$3\r\nold\r\n$3\r\nnew\r\n$4\r\n1500\r\n"},
		{"fenced", command{op: opScript, s: &raiseFenceScript, fenced: true, key: "{a}", token: "t", n: -7},
			"*7\r\n$7\r\nEVALSHA\r\n$40\r\n" + raiseFenceScript.sha + "\r\n$1\r\n2\r\n$3\r\n{a}\r\n$9\r\n{a}:fence\r\n$1\r\nt\r\n$2\r\n-7\r\n"},
	}
	for _, c := range cases {
		if got := string(c.cmd.encode(nil, c.cmd.eval)); got != c.want {
			t.Errorf("%s: encoded %q, want %q", c.name, got, c.want)
		}
	}
}

func TestEncodeAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 4096)
	cmd := command{op: opScript, s: &acquireFencedScript, fenced: true, key: "order:{42}", token: "0123456789abcdef", n: 10000}
	if n := testing.AllocsPerRun(100, func() { buf = cmd.encode(buf[:0], false) }); n != 0 {
		t.Fatalf("encoding a command allocated %v times, want 0", n)
	}
}

func TestReadReply(t *testing.T) {
	cases := []struct {
		in    string
		kind  byte
		n     int64
		err   string // a substring of the error; "" for none
		fatal bool
		bulk  string
	}{
		{"+OK\r\n", replyStatus, 0, "", false, ""},
		{"$-1\r\n", replyNil, 0, "", false, ""},
		{"*-1\r\n", replyNil, 0, "", false, ""},
		{":1\r\n", replyInt, 1, "", false, ""},
		{":-42\r\n", replyInt, -42, "", false, ""},
		{":9223372036854775807\r\n", replyInt, 9223372036854775807, "", false, ""},
		{"-NOSCRIPT No matching script\r\n", 0, 0, "NOSCRIPT No matching script", false, ""},
		{"-READONLY You can't write against a read only replica.\r\n", 0, 0, "READONLY", false, ""},
		// Malformed or unexpected: the stream is out of step.
		{"+OK\n", 0, 0, "unexpected reply", true, ""},
		{":1x\r\n", 0, 0, "integer", true, ""},
		{":99999999999999999999\r\n", 0, 0, "integer", true, ""},
		{":\r\n", 0, 0, "unexpected reply", true, ""},
		// A bulk string (a fair release's grant), short ones only.
		{"$3\r\nabc\r\n", replyBulk, 0, "", false, "abc"},
		{"$0\r\n\r\n", replyBulk, 0, "", false, ""},
		{"$3\r\nabcd\r\n", 0, 0, "not ended by CRLF", true, ""},
		{"$5\r\nab", 0, 0, "EOF", true, ""},
		{"$1025\r\n" + strings.Repeat("x", 1025) + "\r\n", 0, 0, "unexpected reply", true, ""},
		{"*2\r\n:1\r\n:2\r\n", 0, 0, "unexpected reply", true, ""},
		{"?what\r\n", 0, 0, "unexpected reply", true, ""},
		{"+O", 0, 0, "EOF", true, ""},
		{"", 0, 0, "EOF", true, ""},
	}
	for _, c := range cases {
		kind, n, bulk, err, fatal := readReply(bufio.NewReader(strings.NewReader(c.in)))
		if kind != c.kind || n != c.n || bulk != c.bulk || fatal != c.fatal {
			t.Errorf("readReply(%q) = %q, %d, %q, fatal %v; want %q, %d, %q, fatal %v", c.in, kind, n, bulk, fatal, c.kind, c.n, c.bulk, c.fatal)
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("readReply(%q): unexpected error %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("readReply(%q): error %v, want one containing %q", c.in, err, c.err)
		}
	}
}

func TestReadReplyErrors(t *testing.T) {
	_, _, _, err, _ := readReply(bufio.NewReader(strings.NewReader("-NOSCRIPT No matching script\r\n")))
	if !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Errorf("an error reply %v is not recognised by redis.HasErrorPrefix", err)
	}
	_, _, _, err, fatal := readReply(bufio.NewReader(strings.NewReader(":x\r\n")))
	if !fatal || !errors.Is(err, errProtocol) {
		t.Errorf("a malformed integer gave %v (fatal %v), want errProtocol, fatal", err, fatal)
	}
	_, _, _, err, fatal = readReply(bufio.NewReaderSize(strings.NewReader("+"+strings.Repeat("x", 100)+"\r\n"), 16))
	if !fatal || !errors.Is(err, errProtocol) {
		t.Errorf("a line longer than the buffer gave %v (fatal %v), want errProtocol, fatal", err, fatal)
	}
	_, _, _, err, fatal = readReply(bufio.NewReader(strings.NewReader("")))
	if !fatal || !errors.Is(err, io.EOF) {
		t.Errorf("an empty stream gave %v (fatal %v), want io.EOF, fatal", err, fatal)
	}
}

func TestReadReplyAllocatesNothing(t *testing.T) {
	const replies = "+OK\r\n$-1\r\n:1\r\n:0\r\n"
	r := strings.NewReader(replies)
	br := bufio.NewReader(r)
	n := testing.AllocsPerRun(100, func() {
		r.Reset(replies)
		br.Reset(r)
		for range 4 {
			if _, _, _, err, _ := readReply(br); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n != 0 {
		t.Fatalf("reading four replies allocated %v times, want 0", n)
	}
}
