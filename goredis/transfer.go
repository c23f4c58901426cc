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
	if g.w != nil {
		return transferReply(scriptInt(g.w.do(ctx, transferCommand(key, oldToken, newToken, ttl))))
	}
	queue, _, _ := redlock.QueueKeys(key)
	n, wait, err := g.exec(ctx, true, transferScript, 2, key, queue, oldToken, newToken, ttl.Milliseconds())
	if ok, err := transferReply(n, err); !ok {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err // made, maybe lost in a failover: may have happened
	}
	return true, nil
}

// StartTransfer sends Transfer's script on the node's own connection and
// returns at once (redlock.TransferStarter).
func (g *wireNode) StartTransfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) redlock.Pending {
	return g.w.start(ctx, transferCommand(key, oldToken, newToken, ttl))
}

// transferReply is Transfer's answer to the script's reply n
// (redlock.Lua.Transfer).
func transferReply(n int64, err error) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case n == -1:
		return false, redlock.ErrWaitersQueued
	}
	return n == 1, nil
}

// transferCommand is Transfer on the node's own connection: KEYS are the
// key and its queue (command.encode).
func transferCommand(key, oldToken, newToken string, ttl time.Duration) command {
	return command{op: opScript, s: &transferScript, key: key, token: oldToken, next: newToken, n: ttl.Milliseconds()}
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
