package rueidisnode

import (
	"context"
	"strconv"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// transferScript hands a held key to the next holder (redlock.Transferrer).
var transferScript = rueidis.NewLuaScript(redlock.Lua.Transfer)

// Transfer sets key to newToken with the TTL if it holds oldToken and no
// Lock call is queued for it, in one script (redlock.Lua.Transfer).
func (n *node) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	queue, _, _ := redlock.QueueKeys(key)
	v, err := n.run(ctx, transferScript, []string{key, queue}, oldToken, newToken, strconv.FormatInt(ttl.Milliseconds(), 10))
	if err == nil && v == -1 {
		return false, redlock.ErrWaitersQueued
	}
	return v == 1, err
}

// Transfer on a cluster maps the key as Acquire does (clusterKey).
func (g *clusterNode) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.node.Transfer(ctx, k, oldToken, newToken, ttl)
}
