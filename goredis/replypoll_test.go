package goredis

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socketPair returns both ends of a loopback TCP connection.
func socketPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { server.Close() })
	return client, server
}

// alone makes the test's goroutine the process's only one waiting for a
// reply, as a lone caller in finish is, for the rest of the test.
func alone(t *testing.T) {
	t.Helper()
	require.Zero(t, waiting.Load(), "no other call waits for a node while the test runs")
	waiting.Add(1)
	t.Cleanup(func() { waiting.Add(-1) })
}

func pollable(t *testing.T) {
	t.Helper()
	if !canPoll {
		t.Skip("replies are polled for on Linux only")
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("replies are not polled for with GOMAXPROCS 1")
	}
}

// lonePoller returns a poller looking for up to d over the client end of
// a loopback connection, and both ends, the test's goroutine being the
// process's only one waiting for a reply (alone).
func lonePoller(t *testing.T, d time.Duration) (p *poller, client, server net.Conn) {
	t.Helper()
	pollable(t)
	alone(t)
	client, server = socketPair(t)
	p = new(poller)
	p.reset(client, d)
	require.NotNil(t, p.rc)
	return p, client, server
}

// TestPollerBacksOffAndRecovers: a look that runs out skips the next 1,
// 2, 4 ... lone calls, and a look that finds the reply ends the skipping.
func TestPollerBacksOffAndRecovers(t *testing.T) {
	p, client, server := lonePoller(t, 100*time.Microsecond)

	// Nothing to read: every look runs out, and the skips double.
	wantSkips := []int{1, 2, 4, 8}
	for _, want := range wantSkips {
		p.await(time.Time{})
		assert.Equal(t, want, p.skip, "skips after a look that ran out")
		for range want {
			p.await(time.Time{})
		}
		assert.Zero(t, p.skip, "each lone call used one skip")
	}
	for range 10 { // the skips stop growing at maxPollSkip
		p.await(time.Time{})
		for p.skip > 0 {
			p.await(time.Time{})
		}
	}
	p.await(time.Time{})
	assert.Equal(t, maxPollSkip, p.skip)
	for p.skip > 0 {
		p.await(time.Time{})
	}

	// A reply there: the look finds it and the skipping ends. (The look
	// may last long: it ends when the reply is seen, whenever loopback
	// delivers it.)
	_, err := server.Write([]byte("+OK\r\n"))
	require.NoError(t, err)
	require.NoError(t, client.SetReadDeadline(time.Now().Add(5*time.Second)))
	p.d = 5 * time.Second
	p.await(time.Time{})
	assert.Zero(t, p.misses)
	assert.Zero(t, p.skip)
	buf := make([]byte, 5)
	_, err = io.ReadFull(client, buf)
	require.NoError(t, err)
	assert.Equal(t, "+OK\r\n", string(buf), "looking consumed nothing")
}

// TestPollerLeavesTheCPUToOthers: when another goroutine of the process
// waits for a node, a lone caller does not look (nor count a miss).
func TestPollerLeavesTheCPUToOthers(t *testing.T) {
	p, _, _ := lonePoller(t, time.Millisecond)
	waiting.Add(1) // another caller waits
	defer waiting.Add(-1)
	p.await(time.Time{})
	assert.Zero(t, p.misses, "no look was made")
	assert.Zero(t, p.skip)
}

// TestPollerStopsAtTheDeadline: a look never outlasts the read's deadline:
// one whose deadline has passed runs out at once, a miss.
func TestPollerStopsAtTheDeadline(t *testing.T) {
	p, _, _ := lonePoller(t, time.Millisecond)
	p.await(time.Now().Add(-time.Second))
	assert.Equal(t, 1, p.misses, "the look ran out at the deadline")
}

// TestPollerSeesTheEnd: a connection the server closed counts as
// something to read (the read that follows returns io.EOF), not a miss.
func TestPollerSeesTheEnd(t *testing.T) {
	p, client, server := lonePoller(t, 5*time.Second) // it ends when the end is seen
	require.NoError(t, server.Close())
	require.NoError(t, client.SetReadDeadline(time.Now().Add(5*time.Second)))
	p.await(time.Time{})
	assert.Zero(t, p.misses)
	_, err := client.Read(make([]byte, 1))
	assert.ErrorIs(t, err, io.EOF)
}

// TestPollerOff: no polling with 0, on a connection that is not a socket,
// or with GOMAXPROCS 1.
func TestPollerOff(t *testing.T) {
	client, _ := socketPair(t)
	var p poller
	p.reset(client, 0)
	assert.Nil(t, p.rc, "WithReplyPoll(0)")
	pipe, other := net.Pipe()
	defer pipe.Close()
	defer other.Close()
	p.reset(pipe, time.Millisecond)
	assert.Nil(t, p.rc, "not a socket")
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p.reset(client, time.Millisecond)
	assert.Nil(t, p.rc, "GOMAXPROCS 1")
	var off poller
	off.await(time.Time{}) // looks at nothing, never blocks
	assert.Zero(t, off.misses)
}

func TestWithReplyPollOutOfRange(t *testing.T) {
	c := redistest.Client(t, miniredis.RunT(t).Addr())
	for _, d := range []time.Duration{-time.Microsecond, maxReplyPoll + 1} {
		_, err := New(c, WithReplyPoll(d))
		assert.ErrorIs(t, err, redlock.ErrInvalid, "WithReplyPoll(%v)", d)
		assert.ErrorContains(t, err, "WithReplyPoll")
	}
	for _, d := range []time.Duration{0, time.Microsecond, maxReplyPoll} {
		_, err := New(c, WithReplyPoll(d))
		assert.NoError(t, err, "WithReplyPoll(%v)", d)
	}
}

// TestWireLooksForItsReply: a lone caller's connection looks for its
// replies, and finds them from a loopback server (a look can run out on
// a loaded machine, hence several calls: the misses end with the first
// reply found); WithReplyPoll(0) leaves the connection without a poller.
func TestWireLooksForItsReply(t *testing.T) {
	pollable(t)
	addr := miniredis.RunT(t).Addr()
	for _, d := range []time.Duration{maxReplyPoll, 0} {
		n := wired(t, redistest.Client(t, addr), WithReplyPoll(d))
		found := false
		for i := 0; i < 500 && !found; i++ {
			ok, err := n.Acquire(t.Context(), "k", "tok", time.Minute)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = n.StartRelease(t.Context(), "k", "tok", false).Finish()
			require.NoError(t, err)
			require.True(t, ok)
			found = n.w.poll.misses == 0
		}
		if d == 0 {
			assert.Nil(t, n.w.poll.rc, "WithReplyPoll(0): no poller")
			continue
		}
		require.NotNil(t, n.w.poll.rc)
		assert.True(t, found, "some look found its reply within %v", d)
	}
}

// TestPollerAllocatesNothing: a look allocates nothing (the wire's calls
// allocate nothing, TestWireAllocatesNothing, whose AllocsPerRun runs
// with GOMAXPROCS 1, where the wire does not look).
func TestPollerAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p, _, server := lonePoller(t, 5*time.Second) // it ends when the reply is seen
	_, err := server.Write([]byte("+OK\r\n"))
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		p.await(time.Time{})
		if p.misses != 0 {
			t.Fatal("the look did not find the reply there")
		}
	})
	assert.Zero(t, allocs)
}
