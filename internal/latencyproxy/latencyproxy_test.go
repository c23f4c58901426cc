package latencyproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func start(t *testing.T, target string) *Proxy {
	p, err := New(func() string { return target })
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &conn{c, bufio.NewReader(c)}
}

// roundTrip sends a line and reads it back within timeout.
func (c *conn) roundTrip(line string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return 0, err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if got != line+"\n" {
		return 0, errors.New("echoed " + got)
	}
	return time.Since(start), nil
}

func TestForwards(t *testing.T) {
	p := start(t, echo(t))
	c := dial(t, p.Addr())
	for _, line := range []string{"hello", "world"} {
		_, err := c.roundTrip(line, 5*time.Second)
		require.NoError(t, err)
	}
}

func TestDelayPerDirection(t *testing.T) {
	p := start(t, echo(t))
	c := dial(t, p.Addr())
	const d = 100 * time.Millisecond
	for _, tc := range []struct {
		up, down, atLeast time.Duration
	}{{d, 0, d}, {0, d, d}, {d, d, 2 * d}} {
		p.SetDelay(tc.up, tc.down)
		rtt, err := c.roundTrip("x", 10*time.Second)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, rtt, tc.atLeast, "up %v down %v", tc.up, tc.down)
	}
	p.SetDelay(0, 0)
	_, err := c.roundTrip("fast again", 10*time.Second)
	require.NoError(t, err)
}

func TestHoldQueuesAndReleaseDelivers(t *testing.T) {
	p := start(t, echo(t))
	open := dial(t, p.Addr())
	_, err := open.roundTrip("before", 5*time.Second)
	require.NoError(t, err)

	p.Hold()
	_, err = open.roundTrip("held", 100*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "nothing comes back while held")
	assert.True(t, ne.Timeout())
	fresh := dial(t, p.Addr()) // accepted while held
	_ = fresh.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = fresh.Write([]byte("queued\n"))
	require.NoError(t, err)

	p.Release()
	_ = open.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := open.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "held\n", got, "what was sent during the hold is delivered after it")
	got, err = fresh.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "queued\n", got)
}

func TestCutClosesAndResets(t *testing.T) {
	p := start(t, echo(t))
	open := dial(t, p.Addr())
	_, err := open.roundTrip("before", 5*time.Second)
	require.NoError(t, err)

	p.Cut()
	_, err = open.roundTrip("after", 5*time.Second)
	assert.Error(t, err, "an open connection is closed")
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "it fails at once, it does not hang")
	assertReset(t, p.Addr())

	p.Release()
	_, err = dial(t, p.Addr()).roundTrip("back", 5*time.Second)
	require.NoError(t, err)
}

func TestTargetDownResets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	ln.Close()
	p := start(t, dead)
	assertReset(t, p.Addr())
}

// assertReset checks that a client of addr fails at once: the connection
// is refused or reset, it does not hang.
func assertReset(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "reset at once")
}

func TestCloseEndsEverything(t *testing.T) {
	before := goleak.IgnoreCurrent()
	target := echo(t)
	p, err := New(func() string { return target })
	require.NoError(t, err)
	delayed := dial(t, p.Addr())
	held := dial(t, p.Addr())
	_, err = held.roundTrip("warm", 5*time.Second)
	require.NoError(t, err)
	p.SetDelay(time.Hour, time.Hour)
	_, _ = delayed.Write([]byte("slow\n"))
	p.Hold()
	_, _ = held.Write([]byte("stuck\n"))

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "idempotent")
	_ = delayed.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = delayed.r.ReadString('\n')
	assert.Error(t, err, "connections are closed")
	goleak.VerifyNone(t, before, goleak.IgnoreTopFunction("io.Copy"),
		// the echo server's goroutines end at cleanup
		goleak.IgnoreAnyFunction("github.com/quorumlock/redlock/internal/latencyproxy.echo.func1"),
		goleak.IgnoreAnyFunction("github.com/quorumlock/redlock/internal/latencyproxy.echo.func1.1"))
}

func TestNilTarget(t *testing.T) {
	_, err := New(nil)
	assert.Error(t, err)
}
