package rueidisnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counting is a script with a side effect to count its executions: it
// increments KEYS[1] and returns the new value.
var counting = driver.NewScript("counting", `return redis.call("incr", KEYS[1])`)

// TestEvalReplies: each kind of reply a script sends, converted to the
// contract's types, over miniredis and a real redis-server speaking RESP3
// (rueidis's default) and RESP2.
func TestEvalReplies(t *testing.T) {
	m := miniredis.RunT(t)
	srv := redistest.Start(t, 1).Servers[0]
	nodes := map[string]*Node{
		"miniredis": serverNode(t, m.Addr(), single),
		"RESP3":     serverNode(t, srv.Addr()),
		"RESP2":     serverNode(t, srv.Addr(), resp2),
	}
	replies := []struct {
		name, src string
		want      any
	}{
		{"integer", `return 42`, int64(42)},
		{"negative", `return -7`, int64(-7)},
		{"number truncated", `return 3.7`, int64(3)},
		{"true", `return true`, int64(1)},
		{"false", `return false`, nil},
		{"nil bulk", `return redis.call("get", KEYS[1])`, nil},
		{"bulk string", `return ARGV[1]`, "arg"},
		{"empty string", `return ""`, ""},
		{"status", `return redis.status_reply("FINE")`, "FINE"},
		{"status table", `return {ok = "OK"}`, "OK"},
		{"empty array", `return {}`, []any{}},
		{"array", `return {1, "two", {3, "four"}}`, []any{int64(1), "two", []any{int64(3), "four"}}},
		{"nils in an array", `return redis.call("mget", KEYS[1], KEYS[2])`, []any{nil, nil}},
		{"mixed", `redis.call("set", KEYS[2], "v"); return redis.call("mget", KEYS[1], KEYS[2])`, []any{nil, "v"}},
	}
	for name, n := range nodes {
		t.Run(name, func(t *testing.T) {
			for _, r := range replies {
				keys := []string{"{replies}:" + name + ":1", "{replies}:" + name + ":2"}
				got, err := n.Eval(t.Context(), driver.NewScript(r.name, r.src), keys, "arg")
				require.NoError(t, err, r.name)
				assert.Equal(t, r.want, got, r.name)
			}
		})
	}
}

// TestEvalErrorReplies: an error reply is an error carrying the node's
// text in full (rueidis drops a leading "ERR " from its own), which
// unwraps to rueidis's RedisError.
func TestEvalErrorReplies(t *testing.T) {
	m := miniredis.RunT(t)
	srv := redistest.Start(t, 1).Servers[0]
	nodes := map[string]*Node{
		"miniredis": serverNode(t, m.Addr(), single),
		"RESP3":     serverNode(t, srv.Addr()),
		"RESP2":     serverNode(t, srv.Addr(), resp2),
	}
	for name, n := range nodes {
		t.Run(name, func(t *testing.T) {
			for src, want := range map[string]string{
				`return redis.error_reply("MYCODE custom text")`:                      "MYCODE custom text",
				`return {err = "ERR plain"}`:                                          "ERR plain",
				`redis.call("set", KEYS[1], "x"); return redis.call("incr", KEYS[1])`: "ERR value is not an integer",
			} {
				got, err := n.Eval(t.Context(), driver.NewScript("failing", src), []string{"errors:" + name})
				require.Error(t, err, src)
				assert.Nil(t, got)
				assert.Contains(t, err.Error(), want, src)
				_, ok := rueidis.IsRedisErr(errors.Unwrap(err))
				assert.True(t, ok, "%s: unwraps to a RedisError: %T", src, err)
			}
			_, err := n.Eval(t.Context(), driver.NewScript("syntax", `return (`), nil)
			assert.Error(t, err, "a script that does not compile")
		})
	}
}

// direct is a go-redis client of the server at addr, to look at it.
func direct(t *testing.T, addr string) *redis.Client { return redistest.Client(t, addr) }

// TestEvalNoscriptFallback: the first call of a script the node does not
// know sends EVALSHA, which answers NOSCRIPT (nothing ran), then EVAL
// once; later calls send EVALSHA alone. The script runs once per call.
func TestEvalNoscriptFallback(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	d := direct(t, srv.Addr())
	for _, change := range []func(*rueidis.ClientOption){func(*rueidis.ClientOption) {}, resp2} {
		n := serverNode(t, srv.Addr(), change)
		require.NoError(t, d.ScriptFlush(t.Context()).Err())
		key := fresh("noscript")
		evalsha, eval := redistest.Calls(t, d, "evalsha"), redistest.Calls(t, d, "eval")
		got, err := n.Eval(t.Context(), counting, []string{key})
		require.NoError(t, err)
		assert.Equal(t, int64(1), got)
		assert.Equal(t, evalsha+1, redistest.Calls(t, d, "evalsha"), "EVALSHA first")
		assert.Equal(t, eval+1, redistest.Calls(t, d, "eval"), "EVAL once, after NOSCRIPT")

		got, err = n.Eval(t.Context(), counting, []string{key})
		require.NoError(t, err)
		assert.Equal(t, int64(2), got, "the script ran once per call")
		assert.Equal(t, evalsha+2, redistest.Calls(t, d, "evalsha"))
		assert.Equal(t, eval+1, redistest.Calls(t, d, "eval"), "the node knows the script now: no EVAL")
	}
}

// TestEvalNeverResends: a script whose reply is lost after it ran is an
// error, never the answer of a second execution, with rueidis's retries
// on: rueidis resends after a broken connection only commands marked
// retryable, and neither EVALSHA nor EVAL is. That holds for the EVAL
// that follows NOSCRIPT too, and the client works again afterwards.
func TestEvalNeverResends(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	d := direct(t, srv.Addr())
	loser := &replyLoser{}
	n := serverNode(t, srv.Addr(), quiet, loser.option)
	for _, noscript := range []bool{false, true} {
		t.Run(fmt.Sprintf("NOSCRIPT=%v", noscript), func(t *testing.T) {
			key := fresh("lost")
			if noscript {
				require.NoError(t, d.ScriptFlush(t.Context()).Err())
				loser.arm(t, n, 2) // NOSCRIPT arrives, EVAL's reply is lost
			} else {
				_, err := n.Eval(t.Context(), counting, []string{fresh("warm")}) // the node knows the script
				require.NoError(t, err)
				loser.arm(t, n, 1)
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
			got, err = n.Eval(t.Context(), counting, []string{key})
			require.NoError(t, err, "rueidis reconnected")
			assert.Equal(t, int64(2), got)
		})
	}
}

// TestEvalDeadline: against a node that does not answer (SIGSTOP), Eval
// returns by its context's deadline with an error, whether it is alone on
// its connection or shares it; a context already done sends nothing.
func TestEvalDeadline(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	d := direct(t, srv.Addr())
	n := serverNode(t, srv.Addr())
	_, err := n.Eval(t.Context(), counting, []string{"deadline:warm"}) // connected, the script known
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := redistest.Calls(t, d, "evalsha")
	_, err = n.Eval(ctx, counting, []string{"deadline:done"})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, calls, redistest.Calls(t, d, "evalsha"), "nothing sent")

	require.NoError(t, srv.Pause())
	defer func() { require.NoError(t, srv.Resume()) }()
	const bound = 200 * time.Millisecond
	for _, concurrent := range []int{1, 4} {
		errs := make(chan error, concurrent)
		start := time.Now()
		for range concurrent {
			go func() {
				ctx, cancel := context.WithTimeout(t.Context(), bound)
				defer cancel()
				_, err := n.Eval(ctx, counting, []string{"deadline:paused"})
				errs <- err
			}()
		}
		for range concurrent {
			assert.ErrorIs(t, <-errs, context.DeadlineExceeded, "%d calls", concurrent)
		}
		assert.Less(t, time.Since(start), bound+time.Second, "%d calls: bounded by the deadline", concurrent)
	}
}

// TestEvalCrossSlot: on a cluster node, keys of several hash slots are
// refused with ErrInvalid (rueidis would panic building the command).
// miniredis answers CLUSTER SLOTS as a one-node cluster.
func TestEvalCrossSlot(t *testing.T) {
	m := miniredis.RunT(t)
	opt := clientOption([]string{m.Addr()})
	n := described(t, opt)
	require.True(t, n.Info().Cluster)
	_, err := n.Eval(t.Context(), counting, []string{"a", "b"})
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = n.Subscribe(t.Context(), func(string) {}, "a", "b")
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	got, err := n.Eval(t.Context(), counting, []string{"{a}1", "{a}2"})
	require.NoError(t, err, "keys of one slot")
	assert.Equal(t, int64(1), got)
}
