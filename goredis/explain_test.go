package goredis

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockError is the error of one Lock through a Single over c, with a short
// per-node timeout.
func lockError(t *testing.T, c redis.UniversalClient, lock func(*redlock.Redlock) error) error {
	t.Helper()
	l := newSingle(t, adapt(t, c), redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(300*time.Millisecond))
	err := lock(l)
	require.Error(t, err)
	assert.ErrorIs(t, err, redlock.ErrUnavailable)
	return err
}

// A failed Lock names its cause and the node where the client's error
// alone would not: a TLS client on a server without TLS, a server that
// accepts connections and never answers, a long command refused for want
// of a password, a refused connection.
func TestLockErrorsNameTheirCause(t *testing.T) {
	addr := redistest.Start(t, 1).Addrs()[0]
	plainLock := func(l *redlock.Redlock) error { _, err := l.Lock(t.Context(), "k"); return err }
	readLock := func(l *redlock.Redlock) error { _, err := l.RLock(t.Context(), "k"); return err }

	t.Run("TLS on a server without TLS", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			TLSConfig: &tls.Config{}, DialTimeout: 300 * time.Millisecond, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		err := lockError(t, c, plainLock)
		assert.Contains(t, err.Error(), addr+": ")
		assert.Contains(t, err.Error(), "TLS handshake did not finish")
		assert.True(t, errors.Is(err, redlock.ErrUnavailable))
	})
	t.Run("a server that never answers", func(t *testing.T) {
		silent := silentServer(t)
		err := lockError(t, redistest.Client(t, silent), plainLock)
		assert.Contains(t, err.Error(), silent+": ")
		assert.Contains(t, err.Error(), "no connection was ready")
		assert.NotContains(t, err.Error(), "TLS")
	})
	t.Run("a long command without the password", func(t *testing.T) {
		locked := redistest.Start(t, 1).Addrs()[0]
		require.NoError(t, redistest.Client(t, locked).ConfigSet(t.Context(), "requirepass", "the-real-one").Err())
		for name, lock := range map[string]func(*redlock.Redlock) error{"Lock": plainLock, "RLock": readLock} {
			err := lockError(t, redistest.Client(t, locked), lock)
			assert.Contains(t, err.Error(), locked+": NOAUTH", name)
		}
	})
	t.Run("nothing listening", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		err := lockError(t, c, plainLock)
		assert.Contains(t, err.Error(), "127.0.0.1:1: ")
		assert.Contains(t, err.Error(), "connection refused")
	})
}
