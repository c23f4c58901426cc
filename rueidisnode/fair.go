package rueidisnode

import (
	"context"
	"strconv"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/redis/rueidis"
)

// The scripts of redlock.FairQueuer (WithFairness).
var (
	acquireFairScript = rueidis.NewLuaScript(redlock.FairLua.Acquire)
	releaseFairScript = rueidis.NewLuaScript(redlock.FairLua.Release)
)

// AcquireFair runs redlock.FairLua.Acquire on the key and its queue
// (redlock.QueueKeys).
func (n *node) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	q, exp, grants := redlock.QueueKeys(key)
	v, err := n.run(ctx, acquireFairScript, []string{key, q, exp, grants}, token, strconv.FormatInt(ttl.Milliseconds(), 10),
		ticket, strconv.FormatInt(score, 10), strconv.FormatInt(stay.Milliseconds(), 10), strconv.FormatInt(attempt, 10))
	if err != nil {
		return false, 0, err
	}
	if v != 1 {
		return false, -v, nil
	}
	return true, 0, nil
}

// LeaveQueue runs redlock.FairLua.Release without a token, announcing
// with PUBLISH.
func (n *node) LeaveQueue(ctx context.Context, key, ticket string) error {
	_, err := n.releaseFair(ctx, key, "", ticket, true, "1")
	return err
}

// ReleaseFair runs redlock.FairLua.Release, announcing with PUBLISH.
func (n *node) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	return n.releaseFair(ctx, key, token, ticket, announce, "1")
}

func (n *node) releaseFair(ctx context.Context, key, token, ticket string, announce bool, publish string) (bool, error) {
	flag := "0"
	if announce {
		flag = publish
	}
	q, exp, grants := redlock.QueueKeys(key)
	v, err := n.run(ctx, releaseFairScript, []string{key, q, exp, grants}, token, flag, ticket, "1")
	return v == 1, err
}

// ReleaseFair on a cluster maps the key as Release does, and announces
// with SPUBLISH.
func (g *clusterNode) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.releaseFair(ctx, k, token, ticket, announce, "2")
}

// AcquireFair on a cluster maps the key as Acquire does (clusterKey): the
// queue's names extend the mapped key, so they share its hash slot.
func (g *clusterNode) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	return g.node.AcquireFair(ctx, k, token, ttl, ticket, score, stay, attempt)
}

// LeaveQueue on a cluster maps the key as Acquire does (clusterKey).
func (g *clusterNode) LeaveQueue(ctx context.Context, key, ticket string) error {
	k, err := clusterKey(key)
	if err != nil {
		return err
	}
	_, err = g.releaseFair(ctx, k, "", ticket, true, "2")
	return err
}

// NotifyGrants subscribes to the key's release channel and to
// redlock.GrantChannel(key, locker) through the node's hub, in one round.
func (n *node) NotifyGrants(ctx context.Context, key, locker string, granted func(payload string)) (func(), error) {
	return n.hub.notify(ctx, granted, redlock.ReleaseChannel(key), redlock.GrantChannel(key, locker))
}

// NotifyGrants on a cluster maps the key as Notify does: the channel
// extends the mapped key, so it hashes to the key's slot and hub.
func (g *clusterNode) NotifyGrants(ctx context.Context, key, locker string, granted func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, err := clusterKey(key)
	if err != nil {
		return nil, err
	}
	return g.slotHub(hashslot.Of(k)).notify(ctx, granted, redlock.ReleaseChannel(k), redlock.GrantChannel(k, locker))
}
