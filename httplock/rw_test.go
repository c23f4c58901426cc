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

// TestReadLocks: with WithReadLocks, reads of a record run together and
// never beside a write to it: a write during reads, and a read during a
// write, get 409; reads of other records are free.
func TestReadLocks(t *testing.T) {
	for name, open := range backends(t, "reject") {
		t.Run(name, func(t *testing.T) {
			g := newGate()
			m, err := httplock.New(open(t), httplock.PathRecord("shop", "order", "id"), httplock.WithReadLocks())
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.Handle("/orders/{id}", m.Wrap(g))

			reads := make(chan int, 2)
			for range 2 {
				go func() { reads <- do(t, mux, http.MethodGet, "/orders/1").Code }()
			}
			g.waitEntered(t)
			g.waitEntered(t) // both reads hold the record together
			assert.Equal(t, http.StatusConflict, do(t, mux, http.MethodPut, "/orders/1").Code, "a write during reads")
			close(g.release)
			assert.Equal(t, http.StatusOK, <-reads)
			assert.Equal(t, http.StatusOK, <-reads)

			g2 := newGate()
			mux2 := http.NewServeMux()
			mux2.Handle("/orders/{id}", m.Wrap(g2))
			write := make(chan int, 1)
			go func() { write <- do(t, mux2, http.MethodPut, "/orders/1").Code }()
			g2.waitEntered(t)
			assert.Equal(t, http.StatusConflict, do(t, mux2, http.MethodGet, "/orders/1").Code, "a read during a write")
			assert.Equal(t, http.StatusConflict, do(t, mux2, http.MethodHead, "/orders/1").Code, "HEAD reads too")
			close(g2.release)
			assert.Equal(t, http.StatusOK, <-write)
		})
	}
}

// TestReadLocksBadSetup: WithReadLocks is for New, not NewMany.
func TestReadLocksBadSetup(t *testing.T) {
	l := open(t, "reject", miniredis.RunT(t).Addr())
	_, err := httplock.NewMany(l, httplock.PathRecords("bank", "account", "from", "to"), httplock.WithReadLocks())
	assert.ErrorIs(t, err, redlock.ErrInvalid, "NewMany")
}
