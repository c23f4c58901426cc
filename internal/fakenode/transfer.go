package fakenode

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// Transfer is the operation of redlock.Transferrer a hook sees.
const Transfer Op = "transfer"

// Transfer passes through the hook to the wrapped node, which must
// implement redlock.Transferrer when it is used. Token is the old token;
// the hook sees the new one only through what Send does.
func (n *Node) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	r := n.call(ctx, Call{Op: Transfer, Key: key, Token: oldToken, send: func(ctx context.Context) Result {
		ok, err := n.inner.(redlock.Transferrer).Transfer(ctx, key, oldToken, newToken, ttl)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}
