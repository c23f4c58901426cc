package goredis

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"
)

// explain names the cause of a failed call where the client's error does
// not: a timeout before any connection was ready (a TLS URL on a server
// that does not speak TLS waits out the deadline in its handshake),
// Redis's protocol error for a long unauthenticated command, which is a
// missing password like NOAUTH, and a connection the server closed (after
// that protocol error, the next command on the connection reads EOF). The
// result wraps err.
func (n *Node) explain(err error) error {
	switch {
	case isTimeout(err) && n.c.PoolStats().TotalConns == 0:
		if usesTLS(n.c) {
			return fmt.Errorf("no connection was ready: the TLS handshake did not finish (does the server speak TLS at this address?): %w", err)
		}
		return fmt.Errorf("no connection was ready (the server accepted none, or did not answer its greeting): %w", err)
	case redis.HasErrorPrefix(err, "Protocol error: unauthenticated"):
		return fmt.Errorf("NOAUTH: the server requires a password the client did not give (it refused a long unauthenticated command): %w", err)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("the server closed the connection (it does so after refusing a client without the password, or without TLS when it requires TLS): %w", err)
	}
	return err
}

// usesTLS reports whether c connects with TLS.
func usesTLS(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().TLSConfig != nil
	case *redis.ClusterClient:
		return c.Options().TLSConfig != nil
	}
	return false
}

// isTimeout reports whether err is a deadline that passed: the context's,
// or a socket's.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}
