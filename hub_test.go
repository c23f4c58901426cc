package redlock

import (
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendNameNamesTheDatabase: nodes on different databases of one
// server are different nodes, with lines of their own.
func TestBackendNameNamesTheDatabase(t *testing.T) {
	m := miniredis.RunT(t)
	db := func(n int) Backend {
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), DB: n, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return NewBackend(c)
	}
	b0, b2 := db(0), db(2)
	assert.Equal(t, m.Addr(), b0.Name())
	assert.Equal(t, m.Addr()+"/2", b2.Name())
	assert.NotEqual(t, lineID("k", []Backend{b0}), lineID("k", []Backend{b2}))

	r, err := New([]Backend{b0, b2, db(3)})
	require.NoError(t, err, "three databases are three nodes")
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}, DB: 1})
	t.Cleanup(func() { ring.Close() })
	assert.True(t, strings.HasSuffix(NewBackend(ring).Name(), "/1"))
}
