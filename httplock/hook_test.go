package httplock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/httplock"
	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captureLog makes slog.Default() write JSON lines into the buffer it
// returns, until the test ends (the log package's output too, which
// slog.SetDefault redirects; both are restored).
func captureLog(t *testing.T) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	old, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewJSONHandler(buf, nil)))
	t.Cleanup(func() {
		slog.SetDefault(old)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
	return buf
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON lines written so far, decoded.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(b.buf.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// unreachable is a locker whose only node is a closed loopback port, its
// URL with a password.
func unreachable(t *testing.T) (redlock.Locker, string) {
	t.Helper()
	p, err := freeport.Get()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	c := envconfig.Config{Enabled: true, Strategy: envconfig.StrategyReject, TTL: 5 * time.Second,
		Nodes: []string{"redis://alice:s3cr3t-pw@" + addr}}
	l, clients, err := c.Open()
	require.NoError(t, err)
	t.Cleanup(func() { clients.Close() })
	return l, addr
}

// With its only node unreachable, the middleware answers the generic 500
// and, by default, writes one structured slog line saying which key, why
// and which node, without the node's password.
func TestUnreachableNodeIsLogged(t *testing.T) {
	logs := captureLog(t)
	locker, addr := unreachable(t)
	g := newGate()
	h := serve(t, locker, g)

	rec := do(t, h, http.MethodPut, "/suppliers/abc")
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
	assert.JSONEq(t, `{"error":"the lock service is unavailable"}`, rec.Body.String(), "the body stays generic")
	assert.NotContains(t, rec.Body.String(), addr)
	assert.Zero(t, g.calls.Load())

	lines := logs.lines(t)
	require.Len(t, lines, 1, logs.String())
	line := lines[0]
	assert.Equal(t, "ERROR", line["level"])
	assert.Equal(t, "httplock: lock service failed", line["msg"])
	assert.Equal(t, "PUT", line["method"])
	assert.Equal(t, "/suppliers/abc", line["path"])
	assert.Equal(t, []any{"rf:lock:mini-inventory:supplier:abc:write"}, line["keys"])
	assert.Equal(t, "lock service unavailable", line["cause"])
	require.Len(t, line["nodes"], 1)
	node := line["nodes"].([]any)[0].(string)
	assert.Contains(t, node, addr)
	assert.Contains(t, node, "connection refused")
	assert.Contains(t, line["error"], "redlock:")
	assert.NotContains(t, logs.String(), "s3cr3t")
	assert.NotContains(t, logs.String(), "alice")
}

// WithErrorHook replaces the log line: the hook gets the request, its
// keys and the locker's error, and nothing is logged. A nil hook is
// refused.
func TestErrorHookReplacesLog(t *testing.T) {
	logs := captureLog(t)
	locker, _ := unreachable(t)
	type call struct {
		path string
		keys []string
		err  error
	}
	var calls []call
	h := serve(t, locker, newGate(), httplock.WithErrorHook(func(r *http.Request, keys []string, err error) {
		calls = append(calls, call{r.URL.Path, keys, err})
	}))
	assertJSONError(t, do(t, h, http.MethodDelete, "/suppliers/xyz"), http.StatusInternalServerError)
	require.Len(t, calls, 1)
	assert.Equal(t, "/suppliers/xyz", calls[0].path)
	assert.Equal(t, []string{"rf:lock:mini-inventory:supplier:xyz:write"}, calls[0].keys)
	assert.ErrorIs(t, calls[0].err, redlock.ErrUnavailable)
	assert.Empty(t, logs.String())

	_, err := httplock.New(locker, httplock.PathRecord("p", "e", "id"), httplock.WithErrorHook(nil))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
}

// A busy record (409) and a bad record id (400) are the client's: the
// hook does not hear of them. A misconfigured route (500) is the
// server's: it does, with no keys.
func TestErrorHookOnlyForServerFailures(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	var hooked []error
	hook := httplock.WithErrorHook(func(r *http.Request, keys []string, err error) {
		assert.Nil(t, keys)
		hooked = append(hooked, err)
	})
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	require.NoError(t, err)
	held, err := locker.Lock(t.Context(), key)
	require.NoError(t, err)
	defer held.Unlock(context.Background())

	h := serve(t, locker, newGate(), hook)
	assertJSONError(t, do(t, h, http.MethodPut, "/suppliers/abc"), http.StatusConflict)
	assertJSONError(t, do(t, h, http.MethodPut, "/suppliers/a:b"), http.StatusBadRequest)
	assert.Empty(t, hooked)

	mw, err := httplock.New(locker, httplock.PathRecord("p", "e", "ID"), hook)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(&counting{}))
	assertJSONError(t, do(t, mux, http.MethodPut, "/suppliers/abc"), http.StatusInternalServerError)
	require.Len(t, hooked, 1)
	assert.ErrorIs(t, hooked[0], httplock.ErrMisconfigured)

	// A Middleware New did not build reports through the default hook.
	logs := captureLog(t)
	assertJSONError(t, do(t, (&httplock.Middleware{}).Wrap(&counting{}), http.MethodPut, "/x"), http.StatusInternalServerError)
	require.Len(t, logs.lines(t), 1)
	assert.Equal(t, "misconfigured", logs.lines(t)[0]["cause"])
}

// lostAfterWrite is a Locker whose Do runs the function and then reports
// the lock lost, as when the heartbeat failed while the handler was
// finishing its response.
type lostAfterWrite struct{ redlock.Locker }

func (lostAfterWrite) Do(ctx context.Context, key string, fn func(context.Context) error, _ ...redlock.Option) error {
	if err := fn(ctx); err != nil {
		return err
	}
	return fmt.Errorf("%w: quorum lost before the release", redlock.ErrLockLost)
}

// A lock lost after the handler started its response cannot reach the
// client any more; the hook still hears of it.
func TestErrorHookAfterResponseStarted(t *testing.T) {
	logs := captureLog(t)
	h := serve(t, lostAfterWrite{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "saved")
	}))
	rec := do(t, h, http.MethodPut, "/suppliers/abc")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "saved", rec.Body.String(), "no error body after the handler's")
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, "lock lost", lines[0]["cause"])
	assert.Nil(t, lines[0]["nodes"])
}

// NewMany's hook gets every key of the request.
func TestErrorHookKeysOfMany(t *testing.T) {
	locker, _ := unreachable(t)
	var got []string
	mw, err := httplock.NewMany(locker.(redlock.Locker), httplock.PathRecords("bank", "account", "from", "to"),
		httplock.WithMethods(http.MethodPost),
		httplock.WithErrorHook(func(r *http.Request, keys []string, err error) { got = keys }))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{from}/transfers/{to}", mw.Wrap(&counting{}))
	assertJSONError(t, do(t, mux, http.MethodPost, "/accounts/a/transfers/b"), http.StatusInternalServerError)
	assert.Equal(t, []string{"rf:lock:bank:account:a:write", "rf:lock:bank:account:b:write"}, got)
}

// LogError masks the secrets of node names and errors that are URLs, as
// a Backend of one's own may name its node.
func TestLogErrorMasksNodeURLs(t *testing.T) {
	logs := captureLog(t)
	err := fmt.Errorf("redlock: gave up: %w", &redlock.QuorumError{Op: "acquire", Key: "k", Nodes: 2, Quorum: 2, Granted: 1,
		Failed: []redlock.NodeError{{Node: "redis://alice:s3cr3t-pw@10.0.0.1:6379/0",
			Err: errors.New("dial redis://alice:s3cr3t-pw@10.0.0.1:6379/0?password=s3cr3t-pw: refused")}}})
	require.ErrorIs(t, err, redlock.ErrUnavailable)
	r, _ := http.NewRequestWithContext(t.Context(), http.MethodPatch, "/suppliers/abc?token=s3cr3t-pw", nil)
	httplock.LogError(r, []string{"k"}, err)
	lines := logs.lines(t)
	require.Len(t, lines, 1)
	assert.Equal(t, []any{"redis://xxxxx@10.0.0.1:6379/0: dial redis://xxxxx@10.0.0.1:6379/0?password=xxxxx"}, lines[0]["nodes"])
	assert.Equal(t, "lock service unavailable", lines[0]["cause"])
	assert.NotContains(t, logs.String(), "s3cr3t")
	assert.NotContains(t, logs.String(), "alice")
}
