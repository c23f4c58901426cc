package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watchdog bounds every wait; it catches hangs, it is not a timing claim.
const watchdog = 30 * time.Second

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	conns := make(chan net.Conn, 16)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func start(t *testing.T, target string) *Proxy {
	p, err := New(target)
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

// assertReset checks that a client of addr fails at once: the connection
// is refused or reset, it does not hang.
func assertReset(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil { // reset before the handshake completed on our side
		assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(watchdog))
	_, err = c.Read(make([]byte, 1))
	assert.Error(t, err)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "reset at once")
}

// server starts one redis-server (skipped without one, unless
// REDLOCK_REQUIRE_REDIS=1) and returns its address.
func server(t *testing.T) string {
	return redistest.Start(t, 1).Servers[0].Addr()
}

func rclient(t *testing.T, addr string, retries int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: retries,
		DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// value reads key on the server directly; "" when it is absent.
func value(t *testing.T, direct *redis.Client, key string) string {
	v, err := direct.Get(t.Context(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// sendAndClose writes raw bytes through a fresh connection and closes it
// at once, without waiting for any reply: a client that gave up.
func sendAndClose(t *testing.T, addr, data string) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	_, err = c.Write([]byte(data))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

func resp(args ...string) string {
	s := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		s += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	return s
}

func TestPassForwards(t *testing.T) {
	p := start(t, echo(t))
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(watchdog))
	r := bufio.NewReader(c)
	for _, line := range []string{"hello\n", "world\n"} {
		_, err := c.Write([]byte(line))
		require.NoError(t, err)
		got, err := r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, line, got)
	}
	assert.Equal(t, Stats{Conns: 1}, p.Stats())
}

// A SET sent through a late proxy by a go-redis client that timed out (and
// so closed its connection) still lands on the server, later.
func TestLateDeliversAfterTheClientGaveUp(t *testing.T) {
	addr := server(t)
	p := start(t, addr)
	direct := rclient(t, addr, -1)
	c := rclient(t, p.Addr(), -1)
	require.NoError(t, c.Ping(t.Context()).Err(), "warm the pool before the fault")

	p.Set(Fault{Kind: Late, Delay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	err := c.Set(ctx, "k", "late", 0).Err()
	cancel()
	require.Error(t, err, "the client gave up")
	// go-redis closes a connection whose read timed out: the proxy saw
	// the client leave with the SET still held.
	held := p.Pending() > 0
	got := value(t, direct, "k")
	if held && p.Pending() > 0 {
		assert.Empty(t, got, "the server has not seen the SET while the proxy holds it")
	}
	testwait.Until(t, "the late SET landing", func() bool { return value(t, direct, "k") == "late" })
	// The proxy counts a chunk as delivered after its write returns, which
	// can be after the server has run it: wait for the count, do not race it.
	testwait.Until(t, "the proxy letting go of the SET", func() bool { return p.Pending() == 0 })
	st := p.Stats()
	assert.Positive(t, st.LateChunks)
	assert.Positive(t, st.AfterClose, "written after the client closed")
}

// Late fixes a chunk's delivery time when it is read: switching back to
// Pass does not hurry held bytes, and a new connection overtakes them.
func TestLateOvertakenByANewConnection(t *testing.T) {
	addr := server(t)
	p := start(t, addr)
	direct := rclient(t, addr, -1)

	p.Set(Fault{Kind: Late, Delay: 3 * time.Second})
	sendAndClose(t, p.Addr(), resp("SET", "k", "old"))
	testwait.Until(t, "the proxy holding the old SET", func() bool { return p.Pending() == 1 })
	p.Set(Fault{Kind: Pass})
	sendAndClose(t, p.Addr(), resp("SET", "k", "new"))
	testwait.Until(t, "the new SET landing", func() bool { return value(t, direct, "k") != "" })
	if p.Pending() == 1 { // the old one is still held (it surely is unless the machine stalled for seconds)
		assert.Equal(t, "new", value(t, direct, "k"), "the new connection's SET landed first")
	}
	testwait.Until(t, "the old SET landing", func() bool { return p.Pending() == 0 })
	testwait.Until(t, "the old SET overwriting", func() bool { return value(t, direct, "k") == "old" })
}

// On one connection, bytes sent after a late chunk wait behind it.
func TestLateKeepsOrderOnAConnection(t *testing.T) {
	p := start(t, echo(t))
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(watchdog))
	p.Set(Fault{Kind: Late, Delay: 200 * time.Millisecond})
	_, err = c.Write([]byte("first "))
	require.NoError(t, err)
	testwait.Until(t, "the first chunk held", func() bool { return p.Pending() == 1 })
	p.Set(Fault{Kind: Pass})
	_, err = c.Write([]byte("second\n"))
	require.NoError(t, err)
	got, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "first second\n", got)
}

// Late delays each direction by its own delay: a round trip takes at least
// their sum. Pass is fast again.
func TestLateDelaysEachDirection(t *testing.T) {
	p := start(t, echo(t))
	c := dial(t, p.Addr())
	const d = 100 * time.Millisecond
	for _, tc := range []struct {
		up, down, atLeast time.Duration
	}{{d, 0, d}, {0, d, d}, {d, d, 2 * d}} {
		p.Set(Fault{Kind: Late, Delay: tc.up, ReplyDelay: tc.down})
		rtt, err := c.roundTrip("x", watchdog)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, rtt, tc.atLeast, "up %v down %v", tc.up, tc.down)
	}
	assert.EqualValues(t, 2, p.Stats().LateChunks, "client chunks delayed")
	assert.EqualValues(t, 2, p.Stats().LateReplies, "server chunks delayed")
	p.Set(Fault{})
	_, err := c.roundTrip("fast again", watchdog)
	require.NoError(t, err)
	assert.EqualValues(t, 2, p.Stats().LateReplies, "none delayed under Pass")
}

// Delayed replies are delayed, not queued one delay after another: replies
// sent in a burst arrive about one delay after the burst, not one delay
// apiece.
func TestLateRepliesDoNotLimitThroughput(t *testing.T) {
	p := start(t, echo(t))
	c := dial(t, p.Addr())
	_ = c.SetDeadline(time.Now().Add(watchdog))
	const d, lines = 300 * time.Millisecond, 5
	p.Set(Fault{Kind: Late, ReplyDelay: d})
	start := time.Now()
	for i := range lines { // separate writes, so separate chunks both ways
		_, err := c.Write([]byte(strconv.Itoa(i) + "\n"))
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
	}
	for i := range lines {
		got, err := c.r.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(i)+"\n", got, "in order")
	}
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, d)
	assert.Less(t, took, (lines-1)*d, "replies delayed one after another (%v for %d)", took, lines)
}

// A command sent through LoseReply runs, its reply is dropped and the
// connection cut: the client sees an error although the command ran.
func TestLoseReplyRunsTheCommand(t *testing.T) {
	addr := server(t)
	p := start(t, addr)
	direct := rclient(t, addr, -1)
	c := rclient(t, p.Addr(), -1) // no resend
	require.NoError(t, c.Ping(t.Context()).Err())

	p.Set(Fault{Kind: LoseReply})
	err := c.Incr(t.Context(), "n").Err()
	require.Error(t, err)
	assert.ErrorIs(t, err, io.EOF, "the connection was cut")
	assert.Equal(t, "1", value(t, direct, "n"), "the command ran once")
	assert.EqualValues(t, 1, p.Stats().LostReplies)

	p.Set(Fault{Kind: Pass})
	n, err := c.Incr(t.Context(), "n").Result()
	require.NoError(t, err, "a new connection works once the fault is off")
	assert.EqualValues(t, 2, n)
}

// go-redis's default retries resend a command whose reply was lost on
// another pooled connection: it runs again.
func TestLoseReplyResentByGoRedis(t *testing.T) {
	addr := server(t)
	p := start(t, addr)
	direct := rclient(t, addr, -1)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MinIdleConns: 4,
		DialTimeout: time.Second}) // MaxRetries 0: go-redis's default, 3
	t.Cleanup(func() { c.Close() })
	// Four connections used at once are four connections through which a
	// command can be resent (go-redis initialises a connection on its
	// first use, and under LoseReply a new one never gets through).
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _ = c.Do(t.Context(), "blpop", "nothing", "0.1").Err() })
	}
	wg.Wait()
	require.GreaterOrEqual(t, c.PoolStats().IdleConns, uint32(4))

	p.Set(Fault{Kind: LoseReply})
	err := c.Incr(t.Context(), "n").Err()
	require.Error(t, err, "every reply was lost")
	t.Logf("INCR: %v", err)
	ran := value(t, direct, "n")
	t.Logf("INCR ran %s times for one call (go-redis resent it after each lost reply)", ran)
	assert.NotEqual(t, "1", ran, "resent at least once")
	assert.NotEqual(t, "", ran)
}

// Stall holds both directions, also for a client that left meanwhile;
// leaving the stall delivers everything in order.
func TestStallHoldsBothWaysUntilHealed(t *testing.T) {
	addr := server(t)
	p := start(t, addr)
	direct := rclient(t, addr, -1)
	c := rclient(t, p.Addr(), -1)
	require.NoError(t, c.Ping(t.Context()).Err())

	p.Set(Fault{Kind: Stall})
	res := make(chan error, 1)
	go func() { res <- c.Set(t.Context(), "a", "1", 0).Err() }()
	sendAndClose(t, p.Addr(), resp("SET", "b", "2")) // a client that gave up
	testwait.Until(t, "both SETs held", func() bool { return p.Pending() == 2 })
	got := value(t, direct, "a") + value(t, direct, "b")
	if p.Pending() == 2 {
		assert.Empty(t, got, "nothing reaches the server while stalled")
	}
	select {
	case err := <-res:
		t.Fatalf("a reply came back while stalled: %v", err)
	default:
	}

	p.Set(Fault{Kind: Pass})
	select {
	case err := <-res:
		require.NoError(t, err, "the reply comes back after the heal")
	case <-time.After(watchdog):
		t.Fatal("watchdog: no reply after the heal")
	}
	assert.Equal(t, "1", value(t, direct, "a"))
	testwait.Until(t, "the departed client's SET landing", func() bool { return value(t, direct, "b") == "2" })
}

// Under Stall nothing comes back on an open connection, a new connection
// is accepted, and healing delivers what each sent.
func TestStallQueuesAndHealDelivers(t *testing.T) {
	p := start(t, echo(t))
	open := dial(t, p.Addr())
	_, err := open.roundTrip("before", watchdog)
	require.NoError(t, err)

	p.Set(Fault{Kind: Stall})
	_, err = open.roundTrip("held", 100*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "nothing comes back while stalled")
	assert.True(t, ne.Timeout())
	fresh := dial(t, p.Addr()) // accepted while stalled
	_ = fresh.SetDeadline(time.Now().Add(watchdog))
	_, err = fresh.Write([]byte("queued\n"))
	require.NoError(t, err)

	p.Set(Fault{})
	_ = open.SetDeadline(time.Now().Add(watchdog))
	got, err := open.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "held\n", got, "what was sent during the stall is delivered after it")
	got, err = fresh.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "queued\n", got)
}

// Stall also holds what the server sends unasked (here a greeting).
func TestStallHoldsServerBytes(t *testing.T) {
	p := start(t, greeter(t, "hello"))
	p.Set(Fault{Kind: Stall})
	c := dial(t, p.Addr())
	_ = c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := c.r.ReadString('\n')
	var ne net.Error
	require.ErrorAs(t, err, &ne, "nothing comes back while stalled")
	assert.True(t, ne.Timeout())

	p.Set(Fault{})
	_ = c.SetDeadline(time.Now().Add(watchdog))
	got, err := c.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "hello\n", got)
}

// Cut closes open connections at once, drops what they held and resets new
// ones; switching it off lets new connections through.
func TestCutClosesAndResets(t *testing.T) {
	p := start(t, echo(t))
	open := dial(t, p.Addr())
	_, err := open.roundTrip("before", watchdog)
	require.NoError(t, err)
	late := dial(t, p.Addr())
	p.Set(Fault{Kind: Late, Delay: time.Hour})
	_, err = late.Write([]byte("never\n"))
	require.NoError(t, err)
	testwait.Until(t, "the chunk held", func() bool { return p.Pending() == 1 })

	p.Set(Fault{Kind: Cut})
	_, err = open.roundTrip("after", watchdog)
	assert.Error(t, err, "an open connection is closed")
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "it fails at once, it does not hang")
	_ = late.SetDeadline(time.Now().Add(watchdog))
	_, err = late.r.ReadString('\n')
	assert.Error(t, err)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded)
	testwait.Until(t, "the held chunk dropped", func() bool { return p.Pending() == 0 })
	assertReset(t, p.Addr())
	assertReset(t, p.Addr())

	p.Set(Fault{})
	_, err = dial(t, p.Addr()).roundTrip("back", watchdog)
	require.NoError(t, err)
}

// NewFunc's target is read for every new connection; open ones stay with
// their server.
func TestNewFuncFollowsTheTarget(t *testing.T) {
	a, b := greeter(t, "a"), greeter(t, "b")
	var mu sync.Mutex
	target := a
	p, err := NewFunc(func() string { mu.Lock(); defer mu.Unlock(); return target })
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	greeting := func(c *conn) string {
		_ = c.SetDeadline(time.Now().Add(watchdog))
		got, err := c.r.ReadString('\n')
		require.NoError(t, err)
		return got
	}
	first := dial(t, p.Addr())
	assert.Equal(t, "a\n", greeting(first))
	assert.Equal(t, a, p.Target())

	mu.Lock()
	target = b
	mu.Unlock()
	assert.Equal(t, b, p.Target())
	assert.Equal(t, "b\n", greeting(dial(t, p.Addr())), "a new connection goes to the new target")
	_, err = first.Write([]byte("still\n"))
	require.NoError(t, err)
	assert.Equal(t, "a: still\n", greeting(first), "the open one stays with the old")

	mu.Lock()
	target = ""
	mu.Unlock()
	assertReset(t, p.Addr())
}

// greeter starts a server that greets every connection with name and then
// echoes each line prefixed with it.
func greeter(t *testing.T, name string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				_, _ = c.Write([]byte(name + "\n"))
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = c.Write([]byte(name + ": " + line))
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Close ends every goroutine even with bytes held by Late (both ways) and
// Stall.
func TestCloseEndsEverything(t *testing.T) {
	target := echo(t)
	before := goleak.IgnoreCurrent()
	p, err := New(target)
	require.NoError(t, err)
	late, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	defer late.Close()
	p.Set(Fault{Kind: Late, Delay: time.Hour})
	_, _ = late.Write([]byte("slow\n"))
	testwait.Until(t, "the chunk held", func() bool { return p.Pending() == 1 })
	slowReply, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	defer slowReply.Close()
	p.Set(Fault{Kind: Late, ReplyDelay: time.Hour})
	_, _ = slowReply.Write([]byte("echo me\n"))
	testwait.Until(t, "the reply held", func() bool { return p.Stats().LateReplies == 1 })
	p.Set(Fault{Kind: Stall})
	stalled, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	require.NoError(t, err)
	_, _ = stalled.Write([]byte("stuck\n"))
	_ = stalled.Close()
	testwait.Until(t, "the stalled chunk held", func() bool { return p.Pending() == 2 })

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "idempotent")
	assert.Zero(t, p.Pending(), "held bytes were dropped")
	_ = late.SetDeadline(time.Now().Add(watchdog))
	_, err = late.Read(make([]byte, 1))
	assert.Error(t, err, "connections are closed")
	goleak.VerifyNone(t, before, goleak.IgnoreTopFunction("io.Copy"),
		goleak.IgnoreAnyFunction("github.com/quorumlock/redlock/internal/faultproxy.echo.func1.1"),
		goleak.IgnoreAnyFunction("io.Copy"))
}

func TestTargetDownResets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	ln.Close()
	p := start(t, dead)
	assertReset(t, p.Addr())
}

func TestEmptyTarget(t *testing.T) {
	_, err := New("")
	assert.Error(t, err)
	_, err = NewFunc(nil)
	assert.Error(t, err)
}

func TestFaultString(t *testing.T) {
	assert.Equal(t, "late(1s)", Fault{Kind: Late, Delay: time.Second}.String())
	assert.Equal(t, "late(0s, replies 2s)", Fault{Kind: Late, ReplyDelay: 2 * time.Second}.String())
	assert.Equal(t, "cut", Fault{Kind: Cut}.String())
	assert.Equal(t, "lose-reply", Fault{Kind: LoseReply}.String())
	assert.Equal(t, "stall", Fault{Kind: Stall}.String())
	assert.Equal(t, "pass", Fault{}.String())
}
