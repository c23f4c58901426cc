package httplock_test

import (
	"net/http"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/httplock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transfers serves POST /accounts/{from}/transfers/{to}, locking both
// accounts at once, and PUT /accounts/{id}, locking one, on one locker.
func transfers(t *testing.T, locker redlock.Locker, h http.Handler) http.Handler {
	t.Helper()
	many, err := httplock.NewMany(locker.(redlock.Locker), httplock.PathRecords("bank", "account", "from", "to"),
		httplock.WithMethods(http.MethodPost))
	require.NoError(t, err)
	one, err := httplock.New(locker, httplock.PathRecord("bank", "account", "id"))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{from}/transfers/{to}", many.Wrap(h))
	mux.Handle("PUT /accounts/{id}", one.Wrap(h))
	return mux
}

// TestTransferLocksBothAccounts: a transfer holds both accounts: a
// single-account write to either, and a transfer touching either (in any
// direction), get 409 until it ends; other accounts are free.
func TestTransferLocksBothAccounts(t *testing.T) {
	for name, open := range backends(t, "reject") {
		t.Run(name, func(t *testing.T) {
			g := newGate()
			h := transfers(t, open(t), g)
			done := make(chan int, 1)
			go func() { done <- do(t, h, http.MethodPost, "/accounts/a/transfers/b").Code }()
			g.waitEntered(t)
			assert.Equal(t, http.StatusConflict, do(t, h, http.MethodPut, "/accounts/b").Code, "an account of the transfer")
			assert.Equal(t, http.StatusConflict, do(t, h, http.MethodPost, "/accounts/b/transfers/a").Code, "the opposite transfer")
			assert.Equal(t, http.StatusConflict, do(t, h, http.MethodPost, "/accounts/c/transfers/a").Code, "a transfer sharing one account")
			close(g.release)
			assert.Equal(t, http.StatusOK, <-done)
			assert.Equal(t, http.StatusOK, do(t, h, http.MethodPost, "/accounts/c/transfers/d").Code, "other accounts")
			assert.Equal(t, http.StatusOK, do(t, h, http.MethodPost, "/accounts/a/transfers/a").Code, "one account named twice is locked once")
			assert.Equal(t, int32(3), g.calls.Load(), "only the granted requests ran")
		})
	}
}

func TestTransferBadRecords(t *testing.T) {
	g := newGate()
	close(g.release)
	h := transfers(t, open(t, "reject", miniredis.RunT(t).Addr()), g)
	assert.Equal(t, http.StatusBadRequest, do(t, h, http.MethodPost, "/accounts/a:1/transfers/b").Code)
	assert.Zero(t, g.calls.Load())

	_, err := httplock.NewMany(nil, httplock.PathRecords("bank", "account", "from"))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Nil(t, httplock.PathRecords("bank", "account"), "no wildcards")
	assert.Nil(t, httplock.PathRecords("bank", "account", "from", "bad name"))
	_, err = httplock.NewMany(open(t, "reject", miniredis.RunT(t).Addr()).(redlock.Locker), nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid)
}

// TestTransferWildcardNotInRouteFailsClosed: a RecordsFunc naming a
// wildcard the route lacks answers 500 and never runs the handler.
func TestTransferWildcardNotInRouteFailsClosed(t *testing.T) {
	l := open(t, "reject", miniredis.RunT(t).Addr())
	mw, err := httplock.NewMany(l.(redlock.Locker), httplock.PathRecords("bank", "account", "from", "to"), httplock.WithMethods("POST"))
	require.NoError(t, err)
	c := &counting{}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{from}/pay", mw.Wrap(c))
	assert.Equal(t, http.StatusInternalServerError, do(t, mux, http.MethodPost, "/accounts/a/pay").Code)
	assert.Zero(t, c.calls.Load())
}
