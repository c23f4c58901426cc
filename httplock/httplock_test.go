package httplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/httplock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// watchdog bounds every wait in these tests: it is how long a test waits
// before it declares a hang, not a claim about how fast anything is.
const watchdog = 20 * time.Second

// open returns a locker over redis URLs, built the way a service builds
// it: through envconfig.Config.
func open(t *testing.T, strategy string, addrs ...string) redlock.Locker {
	t.Helper()
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		urls[i] = "redis://" + a
	}
	c := envconfig.Config{Enabled: true, Strategy: strategy, TTL: 5 * time.Second,
		Retries: 2, RetryDelay: time.Millisecond, Nodes: urls}
	l, closer, err := c.Open()
	require.NoError(t, err)
	t.Cleanup(func() { closer.Close() })
	return l
}

// backends is what the status-code tests run on: miniredis, one real
// redis-server and three.
func backends(t *testing.T, strategy string) map[string]func(t *testing.T) redlock.Locker {
	return map[string]func(t *testing.T) redlock.Locker{
		"miniredis": func(t *testing.T) redlock.Locker { return open(t, strategy, miniredis.RunT(t).Addr()) },
		"real N=1":  func(t *testing.T) redlock.Locker { return open(t, strategy, redistest.Start(t, 1).Addrs()...) },
		"real N=3":  func(t *testing.T) redlock.Locker { return open(t, strategy, redistest.Start(t, 3).Addrs()...) },
	}
}

// gate is a handler that reports each request it starts on entered and
// then blocks until release is closed, so a test decides exactly when
// requests overlap.
type gate struct {
	entered chan string
	release chan struct{}
	calls   atomic.Int32
}

func newGate() *gate {
	return &gate{entered: make(chan string, 16), release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.calls.Add(1)
	g.entered <- r.PathValue("id")
	select {
	case <-g.release:
	case <-r.Context().Done():
		return // lock lost or client gone: write nothing, the middleware answers
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"status":"updated","id":%q}`+"\n", r.PathValue("id"))
}

func (g *gate) waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(watchdog):
		t.Fatal("handler never entered")
		return ""
	}
}

// serve wraps h under mw on the routes a record service has.
func serve(t *testing.T, locker redlock.Locker, h http.Handler, opts ...httplock.Option) http.Handler {
	t.Helper()
	mw, err := httplock.New(locker, httplock.PathRecord("mini-inventory", "supplier", "id"), opts...)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(h))
	mux.Handle("/suppliers", mw.Wrap(h))
	return mux
}

// do sends one request through h and returns the recorded response. The
// request's context ends after the watchdog, so a request that wrongly
// enters a gate fails the test instead of hanging it.
func do(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(`{"nama":"PT A"}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// async runs do on its own goroutine; the result arrives on the channel.
func async(t *testing.T, h http.Handler, method, path string) <-chan *httptest.ResponseRecorder {
	ch := make(chan *httptest.ResponseRecorder, 1)
	go func() { ch <- do(t, h, method, path) }()
	return ch
}

func wait(t *testing.T, ch <-chan *httptest.ResponseRecorder) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case rec := <-ch:
		return rec
	case <-time.After(watchdog):
		t.Fatal("request never finished")
		return nil
	}
}

// assertJSONError checks a middleware error response.
func assertJSONError(t *testing.T, rec *httptest.ResponseRecorder, status int) string {
	t.Helper()
	assert.Equal(t, status, rec.Code)
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	var body struct{ Error string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "body %q", rec.Body.String())
	assert.NotEmpty(t, body.Error)
	return body.Error
}

// Two updates of one record overlap by construction: the first is held
// inside its handler until the second has its answer. The second gets 409
// without reaching the handler, under reject (at once) and under retry
// (after its retries); then the first finishes with 200 and the record is
// free again.
func TestConcurrentWritesOneRecord(t *testing.T) {
	for _, strategy := range []string{envconfig.StrategyReject, envconfig.StrategyRetry} {
		for name, mk := range backends(t, strategy) {
			t.Run(strategy+"/"+name, func(t *testing.T) {
				locker := mk(t)
				g := newGate()
				h := serve(t, locker, g)

				first := async(t, h, http.MethodPut, "/suppliers/abc")
				g.waitEntered(t)
				for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete} {
					second := do(t, h, method, "/suppliers/abc")
					msg := assertJSONError(t, second, http.StatusConflict)
					assert.Contains(t, msg, "being processed")
				}
				assert.EqualValues(t, 1, g.calls.Load(), "a refused request never reaches the handler")

				close(g.release)
				rec := wait(t, first)
				assert.Equal(t, http.StatusOK, rec.Code)
				assert.JSONEq(t, `{"status":"updated","id":"abc"}`, rec.Body.String())

				// Released when the handler returned: the next update gets in.
				rec = do(t, h, http.MethodPut, "/suppliers/abc")
				assert.Equal(t, http.StatusOK, rec.Code)
				g.waitEntered(t)
			})
		}
	}
}

// Updates of different records run at the same time: both handlers are
// inside at once (the test waits for both before letting either finish),
// which a per-table or global lock would forbid.
func TestDifferentRecordsInParallel(t *testing.T) {
	for name, mk := range backends(t, envconfig.StrategyReject) {
		t.Run(name, func(t *testing.T) {
			g := newGate()
			h := serve(t, mk(t), g)
			a := async(t, h, http.MethodPut, "/suppliers/abc")
			b := async(t, h, http.MethodDelete, "/suppliers/xyz")
			ids := []string{g.waitEntered(t), g.waitEntered(t)}
			assert.ElementsMatch(t, []string{"abc", "xyz"}, ids, "both handlers entered before either finished")
			close(g.release)
			assert.Equal(t, http.StatusOK, wait(t, a).Code)
			assert.Equal(t, http.StatusOK, wait(t, b).Code)
		})
	}
}

// Inserts and reads never lock: they run even while the record (or its
// collection) is locked by someone else, and the RecordFunc is not even
// asked. A locking request for which the RecordFunc says ok = false (a
// bulk update) runs unlocked too: that is the RecordFunc's explicit
// decision.
func TestReadsAndInsertsDoNotLock(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	require.NoError(t, err)
	held, err := locker.Lock(t.Context(), key)
	require.NoError(t, err)
	defer held.Unlock(context.Background())

	var asked atomic.Int32
	byPath := httplock.PathRecord("mini-inventory", "supplier", "id")
	record := func(r *http.Request) (httplock.Record, bool) {
		asked.Add(1)
		if r.Pattern == "/suppliers" {
			return httplock.Record{}, false // the collection: a bulk update, unlocked on purpose
		}
		return byPath(r)
	}
	mw, err := httplock.New(locker, record)
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(ok))
	mux.Handle("/suppliers", mw.Wrap(ok))

	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost} {
		assert.Equal(t, http.StatusOK, do(t, mux, method, "/suppliers/abc").Code, method)
	}
	assert.Equal(t, http.StatusOK, do(t, mux, http.MethodPost, "/suppliers").Code)
	assert.Zero(t, asked.Load(), "reads and inserts do not even name a record")

	assert.Equal(t, http.StatusOK, do(t, mux, http.MethodPut, "/suppliers").Code, "ok = false from the RecordFunc: no lock")
	assert.Equal(t, http.StatusConflict, do(t, mux, http.MethodPut, "/suppliers/abc").Code, "the held record does refuse an update")
	assert.EqualValues(t, 2, asked.Load())
	assert.Equal(t, []string{key}, srv.Keys(), "nothing but the held lock was ever written")
}

// When the lock backend cannot decide, the request gets 500, not 409 (the
// client should not wait for a record that may be free), and the handler
// does not run.
func TestBackendDown(t *testing.T) {
	t.Run("miniredis closed", func(t *testing.T) {
		srv := miniredis.RunT(t)
		g := newGate()
		h := serve(t, open(t, envconfig.StrategyReject, srv.Addr()), g)
		srv.Close()
		msg := assertJSONError(t, do(t, h, http.MethodPut, "/suppliers/abc"), http.StatusInternalServerError)
		assert.Contains(t, msg, "unavailable")
		assert.Zero(t, g.calls.Load())
	})
	t.Run("real 2 of 3 killed", func(t *testing.T) {
		c := redistest.Start(t, 3)
		g := newGate()
		h := serve(t, open(t, envconfig.StrategyRetry, c.Addrs()...), g)
		c.Servers[0].Kill()
		c.Servers[2].Kill()
		assertJSONError(t, do(t, h, http.MethodDelete, "/suppliers/abc"), http.StatusInternalServerError)
		assert.Zero(t, g.calls.Load())
	})
}

// A record id that cannot be part of a lock key is the client's error.
func TestBadRecordID(t *testing.T) {
	g := newGate()
	h := serve(t, open(t, envconfig.StrategyReject, miniredis.RunT(t).Addr()), g)
	msg := assertJSONError(t, do(t, h, http.MethodPut, "/suppliers/abc:write"), http.StatusBadRequest)
	assert.Contains(t, msg, "':'")
	assert.Zero(t, g.calls.Load())
}

// A lock lost while the handler runs (here its key is deleted behind its
// back, as a failed-over master would forget it) cancels the handler's
// request context within a heartbeat, with a cause matching ErrLockLost.
// The handler wrote nothing, so the client gets a 500.
func TestLostLockCancelsHandler(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	require.NoError(t, err)

	entered := make(chan struct{})
	cause := make(chan error, 1)
	h := serve(t, locker, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-time.After(watchdog):
			cause <- errors.New("the handler's context was never cancelled")
		}
	}), httplock.WithLockOptions(redlock.WithTTL(600*time.Millisecond)))

	res := async(t, h, http.MethodPut, "/suppliers/abc")
	select {
	case <-entered:
	case <-time.After(watchdog):
		t.Fatal("handler never entered")
	}
	require.True(t, srv.Exists(key), "the handler runs under the lock")
	srv.Del(key)

	assert.ErrorIs(t, <-cause, redlock.ErrLockLost)
	msg := assertJSONError(t, wait(t, res), http.StatusInternalServerError)
	assert.Contains(t, msg, "lost")
}

// A handler that outlives the TTL several times over keeps its lock: the
// heartbeat renews it on a real redis-server, which expires keys on its own
// clock. The record stays locked throughout, and the handler still answers
// 200 (the gate writes nothing if its context is cancelled).
func TestHandlerLongerThanTTLKeepsLock(t *testing.T) {
	srv := redistest.Start(t, 1)
	locker := open(t, envconfig.StrategyReject, srv.Addrs()...)
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	require.NoError(t, err)
	g := newGate()
	ttl := time.Second
	// Each extension may take 300 ms (the default, TTL/10, was seen to
	// time out under -race on a loaded machine, and the heartbeat rightly
	// takes an unanswered extension for a lost lock).
	h := serve(t, locker, g, httplock.WithLockOptions(redlock.WithTTL(ttl), redlock.WithNodeTimeout(300*time.Millisecond)))

	first := async(t, h, http.MethodPut, "/suppliers/abc")
	g.waitEntered(t)
	for range 7 { // 3.5 TTLs
		time.Sleep(ttl / 2)
		l, err := locker.Lock(t.Context(), key)
		if !assert.ErrorIs(t, err, redlock.ErrNotAcquired, "the record is still locked") {
			l.Unlock(t.Context())
		}
	}
	close(g.release)
	assert.Equal(t, http.StatusOK, wait(t, first).Code)
}

// A panicking handler still releases the record.
func TestPanicReleases(t *testing.T) {
	locker := open(t, envconfig.StrategyReject, miniredis.RunT(t).Addr())
	var panicked atomic.Bool
	h := serve(t, locker, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !panicked.Swap(true) {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/suppliers/abc", nil)
	require.NoError(t, err)
	_, err = client.Do(req)
	require.Error(t, err, "the aborted handler drops the connection")
	require.True(t, panicked.Load())

	req, err = http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/suppliers/abc", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode, "the record was released by the panicking request")
	client.CloseIdleConnections()
}

// WithMethods makes other methods lock, e.g. a POST that acts on an
// existing record; the defaults then no longer lock.
func TestWithMethods(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	g := newGate()
	h := serve(t, locker, g, httplock.WithMethods(http.MethodPost))
	first := async(t, h, http.MethodPost, "/suppliers/abc")
	g.waitEntered(t)
	assertJSONError(t, do(t, h, http.MethodPost, "/suppliers/abc"), http.StatusConflict)
	put := async(t, h, http.MethodPut, "/suppliers/abc")
	g.waitEntered(t) // PUT no longer locks, so it is inside too
	close(g.release)
	assert.Equal(t, http.StatusOK, wait(t, first).Code)
	assert.Equal(t, http.StatusOK, wait(t, put).Code)
}

func TestCustomErrorHandler(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	var seen error
	g := newGate()
	h := serve(t, locker, g, httplock.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
		seen = err
		w.Header().Set("Retry-After", "1")
		httplock.WriteError(w, r, err)
	}))
	first := async(t, h, http.MethodPut, "/suppliers/abc")
	g.waitEntered(t)
	rec := do(t, h, http.MethodPut, "/suppliers/abc")
	assertJSONError(t, rec, http.StatusConflict)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.ErrorIs(t, seen, redlock.ErrNotAcquired)
	close(g.release)
	wait(t, first)
}

func TestNewRejectsBadInput(t *testing.T) {
	locker := open(t, envconfig.StrategyReject, miniredis.RunT(t).Addr())
	rf := httplock.PathRecord("p", "e", "id")
	tests := map[string]func() (*httplock.Middleware, error){
		"nil locker":   func() (*httplock.Middleware, error) { return httplock.New(nil, rf) },
		"nil record":   func() (*httplock.Middleware, error) { return httplock.New(locker, nil) },
		"no methods":   func() (*httplock.Middleware, error) { return httplock.New(locker, rf, httplock.WithMethods()) },
		"empty method": func() (*httplock.Middleware, error) { return httplock.New(locker, rf, httplock.WithMethods("PUT", "")) },
		"nil handler":  func() (*httplock.Middleware, error) { return httplock.New(locker, rf, httplock.WithErrorHandler(nil)) },
		"bad namespace": func() (*httplock.Middleware, error) {
			return httplock.New(locker, rf, httplock.WithKeySpace(httplock.KeySpace{Namespace: "a::b"}))
		},
	}
	for name, mk := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := mk()
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Nil(t, m)
		})
	}
}

func TestStatusOf(t *testing.T) {
	assert.Equal(t, http.StatusConflict, httplock.StatusOf(redlock.ErrNotAcquired))
	assert.Equal(t, http.StatusConflict, httplock.StatusOf(fmt.Errorf("x: %w", redlock.ErrTimeout)))
	assert.Equal(t, http.StatusInternalServerError, httplock.StatusOf(redlock.ErrUnavailable))
	assert.Equal(t, http.StatusInternalServerError, httplock.StatusOf(redlock.ErrLockLost))
	assert.Equal(t, http.StatusInternalServerError, httplock.StatusOf(errors.New("anything")))
	assert.Equal(t, http.StatusBadRequest, httplock.StatusOf(httplock.ErrBadRecord))
}
