package rueidisnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// proxied starts a fault proxy to addr, closed when the test ends.
func proxied(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// quiet makes a client whose next reply is always a command's: one
// pipelined connection (by default rueidis spreads keyed commands over
// several, dialled lazily, and the reply lost would be a new connection's
// handshake), and no PING of idle connections (every Dialer.KeepAlive,
// 1 s by default), whose reply would be lost when the test is slow.
func quiet(o *rueidis.ClientOption) {
	o.PipelineMultiplex = -1
	o.Dialer.KeepAlive = -1
}

// losing is one real redis-server, a rueidis node that reaches it through
// a fault proxy (rueidis's retries left on), and a direct go-redis client
// to look at the server.
type losing struct {
	node   *node
	proxy  *faultproxy.Proxy
	direct *redis.Client
}

func newLosing(t *testing.T, addr string) losing {
	p := proxied(t, addr)
	return losing{node: adapt(t, client(t, p.Addr(), quiet)), proxy: p, direct: redistest.Client(t, addr)}
}

// lose runs call with the next reply lost: the command reaches the server
// and runs, its reply is dropped and the connection cut. It checks that
// the server ran command exactly once more (never resent on another
// connection), and returns call's error.
func (l losing) lose(t *testing.T, command string, call func(ctx context.Context) error) error {
	t.Helper()
	warm(t, l.node)
	before := redistest.Calls(t, l.direct, command)
	lost := l.proxy.Stats().LostReplies
	l.proxy.Set(faultproxy.Fault{Kind: faultproxy.LoseReply})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := call(ctx)
	l.proxy.Set(faultproxy.Fault{Kind: faultproxy.Pass})
	require.Equal(t, lost+1, l.proxy.Stats().LostReplies, "one reply was lost")
	assert.Equal(t, before+1, redistest.Calls(t, l.direct, command), "%s ran exactly once: never resent", command)
	return err
}

// TestLostRepliesAreErrors: a command that ran but whose reply was lost
// is reported as an error, never as the answer of a second execution
// (rueidis resends only commands marked retryable; none of ours is). A
// resent SET NX would have answered "held" and left our key in place; a
// resent release would have answered "not ours".
func TestLostRepliesAreErrors(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	l := newLosing(t, srv.Addr())
	b := l.node

	t.Run("Acquire", func(t *testing.T) {
		err := l.lose(t, "set", func(ctx context.Context) error {
			_, err := b.Acquire(ctx, "lost:acquire", "tok", time.Minute)
			return err
		})
		require.Error(t, err, "the reply was lost: the outcome is unknown")
		v, err := l.direct.Get(t.Context(), "lost:acquire").Result()
		require.NoError(t, err)
		assert.Equal(t, "tok", v, "the SET ran")
	})
	t.Run("Release", func(t *testing.T) {
		require.NoError(t, l.direct.Set(t.Context(), "lost:release", "tok", time.Minute).Err())
		ok, err := b.Release(t.Context(), "lost:other", "tok", false) // the node knows the script now
		require.NoError(t, err)
		require.False(t, ok)
		err = l.lose(t, "evalsha", func(ctx context.Context) error {
			_, err := b.Release(ctx, "lost:release", "tok", true)
			return err
		})
		require.Error(t, err, "the reply was lost: the outcome is unknown")
		assert.Zero(t, l.direct.Exists(t.Context(), "lost:release").Val(), "the release ran")
	})
	t.Run("AcquireFenced", func(t *testing.T) {
		_, _, err := b.AcquireFenced(t.Context(), "{lost:warm}", "tok", time.Minute) // the node knows the script now
		require.NoError(t, err)
		err = l.lose(t, "evalsha", func(ctx context.Context) error {
			_, _, err := b.AcquireFenced(ctx, "{lost:fenced}", "tok", time.Minute)
			return err
		})
		require.Error(t, err, "the reply was lost: the outcome is unknown")
		assert.Equal(t, "1", l.direct.Get(t.Context(), "{lost:fenced}:fence").Val(), "the counter went up once")
		assert.Equal(t, "tok", l.direct.Get(t.Context(), "{lost:fenced}").Val())
	})
	t.Run("works again", func(t *testing.T) {
		ok, err := b.Acquire(t.Context(), "lost:after", "tok", time.Minute)
		require.NoError(t, err)
		assert.True(t, ok, "rueidis reconnected")
	})
}

// replyLoser is a rueidis DialCtxFn whose connections lose one reply on
// demand: after arm(n), the n-th reply read from then on (counted in
// chunks read from the server, one per reply when one command is in
// flight) arrives, so its command ran, and is thrown away, and the
// connection breaks. Unlike the fault proxy's LoseReply, which loses
// every reply while it is on, it loses exactly one: a locker's rollback,
// sent at once after the lost reply, gets through.
type replyLoser struct{ left atomic.Int64 }

func (d *replyLoser) arm(t *testing.T, b *node, n int64) {
	warm(t, b)
	d.left.Store(n)
}

// warm makes sure b's client (made with quiet) has its connection:
// rueidis dials again lazily after a connection broke, and the next reply
// read must be a command's, not the handshake's.
func warm(t *testing.T, b *node) {
	t.Helper()
	require.NoError(t, b.c.Do(t.Context(), b.c.B().Ping().Build()).Error())
}

func (d *replyLoser) dial(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, d: d}, nil
}

type losingConn struct {
	net.Conn
	d *replyLoser
}

func (c *losingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.d.left.Load() > 0 && c.d.left.Add(-1) == 0 {
		_ = c.Conn.Close() // the reply arrived: the command ran
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// losingNode is a rueidis node on a real redis-server whose replies can
// be lost one at a time (rueidis's retries left on), and a direct go-redis
// client to look at the server.
func losingNode(t *testing.T) (*node, *replyLoser, *redis.Client) {
	srv := redistest.Start(t, 1).Servers[0]
	d := &replyLoser{}
	n := adapt(t, client(t, srv.Addr(), quiet, func(o *rueidis.ClientOption) { o.DialCtxFn = d.dial }))
	return n, d, redistest.Client(t, srv.Addr())
}

// TestNoscriptFallbackIsNoResend: after SCRIPT FLUSH, EVALSHA answers
// NOSCRIPT (nothing ran) and rueidis sends EVAL once. When EVAL's reply is
// lost, the call is an error and nothing is sent a third time.
func TestNoscriptFallbackIsNoResend(t *testing.T) {
	b, loser, direct := losingNode(t)
	for _, lose := range []bool{false, true} {
		require.NoError(t, direct.ScriptFlush(t.Context()).Err())
		key := fmt.Sprintf("{noscript:%v}", lose)
		evalsha, eval := redistest.Calls(t, direct, "evalsha"), redistest.Calls(t, direct, "eval")
		if lose {
			loser.arm(t, b, 2) // the NOSCRIPT reply arrives, EVAL's is lost
		}
		ok, fence, err := b.AcquireFenced(t.Context(), key, "tok", time.Minute)
		if lose {
			require.Error(t, err, "EVAL's reply was lost: the outcome is unknown")
		} else {
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, int64(1), fence)
		}
		assert.Equal(t, evalsha+1, redistest.Calls(t, direct, "evalsha"), "EVALSHA once")
		assert.Equal(t, eval+1, redistest.Calls(t, direct, "eval"), "EVAL once, after NOSCRIPT")
		assert.Equal(t, "1", direct.Get(t.Context(), key+":fence").Val(), "the script ran once")
	}
}

// TestLockerOverLostReplies is TestLostRepliesAreErrors seen from a
// locker, as the go-redis adapter's TestResentCommandsCannotLie: the key
// a lost SET may have set is rolled back rather than left to block
// everyone for its TTL, a lost release's reply is not a lost lock, and Do
// whose release's reply is lost succeeds.
func TestLockerOverLostReplies(t *testing.T) {
	b, loser, direct := losingNode(t)
	s, err := redlock.NewSingle(b, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)

	t.Run("acquire", func(t *testing.T) {
		sets := redistest.Calls(t, direct, "set")
		loser.arm(t, b, 1)
		_, err := s.Lock(t.Context(), "locker:acquire")
		require.Error(t, err, "the reply was lost")
		assert.Equal(t, sets+1, redistest.Calls(t, direct, "set"), "SET ran once")
		assert.Zero(t, direct.Exists(t.Context(), "locker:acquire").Val(), "the key we may have set is rolled back")
		lk, err := s.Lock(t.Context(), "locker:acquire")
		require.NoError(t, err, "the key is free again")
		require.NoError(t, lk.Unlock(t.Context()))
	})
	t.Run("release", func(t *testing.T) {
		lk, err := s.Lock(t.Context(), "locker:release")
		require.NoError(t, err)
		evalsha := redistest.Calls(t, direct, "evalsha")
		loser.arm(t, b, 1)
		err = lk.Unlock(t.Context())
		assert.Equal(t, evalsha+1, redistest.Calls(t, direct, "evalsha"), "the release ran once")
		assert.Zero(t, direct.Exists(t.Context(), "locker:release").Val(), "the release ran")
		assert.NotErrorIs(t, err, redlock.ErrNotHeld, "a lost reply is not a lost lock")
		assert.ErrorIs(t, err, redlock.ErrUnavailable, "the node's answer is unknown")
	})
	t.Run("Do", func(t *testing.T) {
		err := s.Do(t.Context(), "locker:do", func(context.Context) error {
			loser.arm(t, b, 1) // the release's reply is lost
			return nil
		})
		assert.NoError(t, err, "the release ran; nothing was lost")
		assert.Zero(t, direct.Exists(t.Context(), "locker:do").Val())
	})
}
