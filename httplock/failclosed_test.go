package httplock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/httplock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file check that a write never reaches its handler
// without the record's lock: every way of getting the configuration or the
// request wrong ends in an error response, never in an unlocked write.

// counting is a handler that counts its calls and answers 204.
type counting struct{ calls atomic.Int32 }

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.calls.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// A wildcard name that the route does not have (PathRecord(..., "ID") on
// {id}) is a server bug: 500 on every locking request, the handler never
// runs, and nothing is locked.
func TestWildcardNotInRouteFailsClosed(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	mw, err := httplock.New(locker, httplock.PathRecord("mini-inventory", "supplier", "ID"))
	require.NoError(t, err)
	h := &counting{}
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(h))
	mux.Handle("/suppliers", mw.Wrap(h))        // no wildcard at all
	mux.Handle("/other/{ID2}", mw.Wrap(h))      // a name that only starts like it
	mux.Handle("/rest/{IDx...}", mw.Wrap(h))    // likewise for a rest wildcard
	mux.Handle("/upper/{ID}/items", mw.Wrap(h)) // the right name: locks

	for _, path := range []string{"/suppliers/abc", "/suppliers", "/other/abc", "/rest/abc"} {
		for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete} {
			msg := assertJSONError(t, do(t, mux, method, path), http.StatusInternalServerError)
			assert.NotContains(t, msg, "ID", "the body does not describe the server's configuration")
		}
	}
	assert.Zero(t, h.calls.Load(), "no write ran without its lock")
	assert.Empty(t, srv.Keys())

	assert.Equal(t, http.StatusNoContent, do(t, mux, http.MethodPut, "/upper/abc/items").Code)
	assert.Equal(t, http.StatusNoContent, do(t, mux, http.MethodGet, "/suppliers/abc").Code, "reads still do not lock")
	assert.EqualValues(t, 2, h.calls.Load())
}

// The error a misconfigured route reports matches ErrMisconfigured, and
// StatusOf maps it to 500.
func TestWildcardNotInRouteError(t *testing.T) {
	locker := open(t, envconfig.StrategyReject, miniredis.RunT(t).Addr())
	var seen error
	mw, err := httplock.New(locker, httplock.PathRecord("p", "e", "ID"),
		httplock.WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) {
			seen = err
			httplock.WriteError(w, r, err)
		}))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(&counting{}))
	assertJSONError(t, do(t, mux, http.MethodPut, "/suppliers/abc"), http.StatusInternalServerError)
	require.ErrorIs(t, seen, httplock.ErrMisconfigured)
	assert.NotErrorIs(t, seen, httplock.ErrBadRecord)
	assert.Contains(t, seen.Error(), `"ID"`, "the error names the wildcard for the server's log")
	assert.Contains(t, seen.Error(), "/suppliers/{id}", "and the route")
	assert.Equal(t, http.StatusInternalServerError, httplock.StatusOf(seen))
}

// A rest wildcard {id...} matches an empty remainder: that request names
// no record, which is the client's error (400), not a write without lock.
func TestEmptyRestWildcardIs400(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	mw, err := httplock.New(locker, httplock.PathRecord("p", "file", "path"))
	require.NoError(t, err)
	h := &counting{}
	mux := http.NewServeMux()
	mux.Handle("/files/{path...}", mw.Wrap(h))

	msg := assertJSONError(t, do(t, mux, http.MethodPut, "/files/"), http.StatusBadRequest)
	assert.Contains(t, msg, "empty")
	assert.Zero(t, h.calls.Load())
	assert.Empty(t, srv.Keys())

	assert.Equal(t, http.StatusNoContent, do(t, mux, http.MethodPut, "/files/a/b.txt").Code)
	assert.EqualValues(t, 1, h.calls.Load())
}

// A request that did not come through a ServeMux pattern (a handler called
// directly, or another router) can still set path values; without one,
// the id is empty: 400.
func TestPathRecordWithoutServeMux(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	mw, err := httplock.New(locker, httplock.PathRecord("p", "e", "id"))
	require.NoError(t, err)
	h := &counting{}
	wrapped := mw.Wrap(h)

	assertJSONError(t, do(t, wrapped, http.MethodPut, "/suppliers/abc"), http.StatusBadRequest)
	assert.Zero(t, h.calls.Load())

	req := httptest.NewRequestWithContext(t.Context(), http.MethodPut, "/suppliers/abc", nil)
	req.SetPathValue("id", "abc")
	rec := httptest.NewRecorder()
	wrapped.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusNoContent, rec.Code)
	assert.EqualValues(t, 1, h.calls.Load())
}

// A PathRecord that could never name a record is refused by New.
func TestNewRejectsBadPathRecord(t *testing.T) {
	locker := open(t, envconfig.StrategyReject, miniredis.RunT(t).Addr())
	for name, rf := range map[string]httplock.RecordFunc{
		"empty wildcard":       httplock.PathRecord("p", "e", ""),
		"wildcard with braces": httplock.PathRecord("p", "e", "{id}"),
		"rest wildcard suffix": httplock.PathRecord("p", "e", "id..."),
		"wildcard with blank":  httplock.PathRecord("p", "e", "record id"),
		"wildcard from digit":  httplock.PathRecord("p", "e", "1id"),
		"empty project":        httplock.PathRecord("", "e", "id"),
		"empty endpoint":       httplock.PathRecord("p", "", "id"),
		"project with colon":   httplock.PathRecord("a:b", "e", "id"),
		"endpoint with colon":  httplock.PathRecord("p", "e:write", "id"),
	} {
		t.Run(name, func(t *testing.T) {
			m, err := httplock.New(locker, rf)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Nil(t, m)
		})
	}
	for _, wildcard := range []string{"id", "_id", "recordID", "ürün"} {
		_, err := httplock.New(locker, httplock.PathRecord("p", "e", wildcard))
		assert.NoError(t, err, wildcard)
	}
}

// Only GET, HEAD, OPTIONS and POST skip the lock by default: a method that
// differs from them, by case or altogether, locks, so a client cannot
// reach a handler that writes on "anything but GET" without the lock.
func TestUnlistedMethodsLock(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	require.NoError(t, err)
	held, err := locker.Lock(t.Context(), key)
	require.NoError(t, err)
	defer held.Unlock(context.Background())

	h := &counting{}
	mux := serve(t, locker, h)
	for _, method := range []string{"put", "Patch", "delete", "PROPPATCH", "MERGE", "get", "post", "TRACE", "X"} {
		assertJSONError(t, do(t, mux, method, "/suppliers/abc"), http.StatusConflict)
	}
	assert.Zero(t, h.calls.Load(), "none of them ran while the record was held")
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost} {
		assert.Equal(t, http.StatusNoContent, do(t, mux, method, "/suppliers/abc").Code, method)
	}
}

// WithMethods matches methods regardless of case, both in the option and
// in the request.
func TestWithMethodsIgnoresCase(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := open(t, envconfig.StrategyReject, srv.Addr())
	key, err := httplock.KeySpace{}.Write("mini-inventory", "supplier", "abc")
	require.NoError(t, err)
	held, err := locker.Lock(t.Context(), key)
	require.NoError(t, err)
	defer held.Unlock(context.Background())

	h := &counting{}
	mux := serve(t, locker, h, httplock.WithMethods("post"))
	for _, method := range []string{"POST", "post", "Post"} {
		assertJSONError(t, do(t, mux, method, "/suppliers/abc"), http.StatusConflict)
	}
	assert.Equal(t, http.StatusNoContent, do(t, mux, http.MethodPut, "/suppliers/abc").Code, "WithMethods replaced the defaults")
}

// A Middleware that New did not build (the zero value, a nil pointer) and
// a nil handler answer 500 to every request instead of running anything.
func TestUnbuiltMiddlewareFailsClosed(t *testing.T) {
	h := &counting{}
	var nilMW *httplock.Middleware
	mw, err := httplock.New(open(t, envconfig.StrategyReject, miniredis.RunT(t).Addr()), httplock.PathRecord("p", "e", "id"))
	require.NoError(t, err)
	for name, wrapped := range map[string]http.Handler{
		"zero Middleware": (&httplock.Middleware{}).Wrap(h),
		"nil Middleware":  nilMW.Wrap(h),
		"nil handler":     mw.Wrap(nil),
	} {
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.Handle("/suppliers/{id}", wrapped)
			for _, method := range []string{http.MethodPut, http.MethodGet} {
				assertJSONError(t, do(t, mux, method, "/suppliers/abc"), http.StatusInternalServerError)
			}
		})
	}
	assert.Zero(t, h.calls.Load())
}

// skipLocker is a broken Locker whose Do reports success without running
// the function.
type skipLocker struct{ redlock.Locker }

func (skipLocker) Do(context.Context, string, func(context.Context) error, ...redlock.Option) error {
	return nil
}

// A Locker that returns without running the handler (and so without a
// response) gets a 500, not an empty 200.
func TestLockerThatSkipsTheHandler(t *testing.T) {
	mw, err := httplock.New(skipLocker{}, httplock.PathRecord("p", "e", "id"))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/suppliers/{id}", mw.Wrap(&counting{}))
	assertJSONError(t, do(t, mux, http.MethodPut, "/suppliers/abc"), http.StatusInternalServerError)
}
