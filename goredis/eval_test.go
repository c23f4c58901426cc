package goredis

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replyLoser is a go-redis Dialer whose connections lose one reply on
// demand: after left is set to n, the n-th chunk read from the server from
// then on (one per reply when one command is in flight) arrives, so its
// command ran, and is thrown away, and the connection breaks.
type replyLoser struct{ left atomic.Int64 }

func (d *replyLoser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
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

// TestEvalNeverResends: a script whose reply is lost after it ran is an
// error, never the answer of a second execution, although the client
// retries (MaxRetries 3, go-redis's default) and does resend a plain
// command whose reply was lost (the control). That holds for the EVAL
// that follows NOSCRIPT, and for a script and its WAIT
// (WithReplicaAck); the client works again afterwards.
func TestEvalNeverResends(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	d := redistest.Client(t, srv.Addr())
	loser := &replyLoser{}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: 3,
		PoolSize: 1, Dialer: loser.dial})
	t.Cleanup(func() { c.Close() })
	// arm makes the client's next reads commands' replies (its connection
	// is up), then loses the left-th.
	arm := func(left int64) {
		t.Helper()
		require.NoError(t, c.Ping(t.Context()).Err())
		loser.left.Store(left)
	}

	t.Run("control", func(t *testing.T) {
		key := fresh("control")
		arm(1)
		require.NoError(t, c.Incr(t.Context(), key).Err(), "go-redis resent the INCR")
		assert.Equal(t, "2", d.Get(t.Context(), key).Val(), "a plain command ran twice: the loser works")
	})
	for name, opts := range map[string][]Option{"plain": nil, "ReplicaAck": {WithReplicaAck(1, 20*time.Millisecond)}} {
		n := adapt(t, c, opts...)
		for _, noscript := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "/NOSCRIPT"}[noscript], func(t *testing.T) {
				key := fresh("lost")
				if noscript {
					require.NoError(t, d.ScriptFlush(t.Context()).Err())
					if opts == nil {
						arm(2) // NOSCRIPT arrives, EVAL's reply is lost
					} else {
						arm(3) // NOSCRIPT and WAIT's reply (20 ms later) arrive, EVAL's is lost
					}
				} else {
					_, _ = n.Eval(t.Context(), counting, []string{fresh("warm")}) // the node knows the script
					arm(1)
				}
				evalsha, eval := redistest.Calls(t, d, "evalsha"), redistest.Calls(t, d, "eval")
				got, err := n.Eval(t.Context(), counting, []string{key})
				require.Error(t, err, "the reply was lost: the outcome is unknown")
				assert.Nil(t, got)
				assert.Equal(t, "1", d.Get(t.Context(), key).Val(), "the script ran exactly once")
				assert.Equal(t, evalsha+1, redistest.Calls(t, d, "evalsha"), "EVALSHA once")
				if noscript {
					assert.Equal(t, eval+1, redistest.Calls(t, d, "eval"), "EVAL once")
				} else {
					assert.Equal(t, eval, redistest.Calls(t, d, "eval"), "no EVAL")
				}
				_, err = n.Eval(t.Context(), counting, []string{key})
				if opts == nil {
					require.NoError(t, err, "go-redis reconnected")
				} else {
					require.ErrorIs(t, err, ErrReplicaAck, "go-redis reconnected; no replica acknowledges")
				}
				assert.Equal(t, "2", d.Get(t.Context(), key).Val())
			})
		}
	}
}

// names records the commands a client's hooks see, one by one and in
// pipelines.
type names struct {
	mu   sync.Mutex
	seen []string
}

func (h *names) add(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.seen = append(h.seen, c.Name())
	}
}

func (h *names) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *names) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.add(cmd); return next(ctx, cmd) }
}

func (h *names) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.add(cmds...); return next(ctx, cmds) }
}

func (h *names) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.seen {
		if s == name {
			n++
		}
	}
	return n
}

// TestEvalThroughTheClient: every script call goes through the client, so
// its hooks see it: EVALSHA, then EVAL once after NOSCRIPT, and later
// EVALSHA alone, each one running the script once; concurrent calls too.
func TestEvalThroughTheClient(t *testing.T) {
	m := miniredis.RunT(t)
	c := redistest.Client(t, m.Addr())
	h := &names{}
	c.AddHook(h)
	n := adapt(t, c)
	got, err := n.Eval(t.Context(), counting, []string{"k"})
	require.NoError(t, err)
	assert.Equal(t, int64(1), got)
	assert.Equal(t, 1, h.count("evalsha"), "EVALSHA first")
	assert.Equal(t, 1, h.count("eval"), "EVAL once, after NOSCRIPT")
	got, err = n.Eval(t.Context(), counting, []string{"k"})
	require.NoError(t, err)
	assert.Equal(t, int64(2), got)
	assert.Equal(t, 2, h.count("evalsha"))
	assert.Equal(t, 1, h.count("eval"), "the node knows the script: no EVAL")

	var wg sync.WaitGroup
	results := make([]int64, 20)
	for i := range results {
		wg.Go(func() {
			r, err := n.Eval(t.Context(), counting, []string{"k"})
			assert.NoError(t, err)
			results[i], _ = r.(int64)
		})
	}
	wg.Wait()
	slices.Sort(results)
	for i, r := range results {
		assert.Equal(t, int64(i+3), r, "every concurrent call ran once and got its own reply")
	}
	assert.Equal(t, 22, h.count("evalsha"), "the hooks saw every call, alone or pipelined")
}
