package goredis

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// transferScript hands a held key to the next holder (redlock.Transferrer).
var transferScript = newScript(redlock.Lua.Transfer)

// Transfer sets key to newToken with the TTL if it holds oldToken, in one
// script (redlock.Lua.Transfer). It grants the next holder, so a node
// WithReplicaAck waits for the replicas as Acquire does.
func (g *node) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	n, wait, err := g.exec(ctx, true, transferScript, 1, key, oldToken, newToken, ttl.Milliseconds())
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err // made, maybe lost in a failover: may have happened
	}
	return true, nil
}

// Transfer on a cluster maps the key as Acquire does (clusterKey).
func (g *clusterNode) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.Transfer(ctx, k, oldToken, newToken, ttl)
	return ok, g.failed(err)
}
