package goredis

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// The scripts of redlock.FairQueuer (WithFairness).
var (
	acquireFairScript = newScript(redlock.FairLua.Acquire)
	releaseFairScript = newScript(redlock.FairLua.Release)
)

// AcquireFair runs redlock.FairLua.Acquire on the key and its queue
// (redlock.QueueKeys). A grant waits for the replicas WithReplicaAck, as
// Acquire does.
func (g *node) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	q, exp, grants := redlock.QueueKeys(key)
	n, wait, err := g.exec(ctx, true, acquireFairScript, 4, key, q, exp, grants, token, ttl.Milliseconds(), ticket, score, stay.Milliseconds(), attempt)
	if err != nil {
		return false, 0, err
	}
	if n != 1 {
		return false, -n, nil
	}
	if err := g.acked(wait); err != nil {
		return false, 0, err // made, maybe lost in a failover: may have happened
	}
	return true, 0, nil
}

// LeaveQueue runs redlock.FairLua.Release without a token, announcing
// with PUBLISH.
func (g *node) LeaveQueue(ctx context.Context, key, ticket string) error {
	_, err := g.releaseFair(ctx, key, "", ticket, true, "1")
	return err
}

// ReleaseFair runs redlock.FairLua.Release, announcing with PUBLISH.
func (g *node) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	return g.releaseFair(ctx, key, token, ticket, announce, "1")
}

func (g *node) releaseFair(ctx context.Context, key, token, ticket string, announce bool, publish string) (bool, error) {
	flag := "0"
	if announce {
		flag = publish
	}
	// A release grants the key to the next waiter only when the waiter
	// can take the grant for an acquisition: not WithReplicaAck, whose
	// acquisitions wait for the replicas (a grant, set by the releaser's
	// script, is waited for by no one).
	grant := "1"
	if g.ack != nil {
		grant = "0"
	}
	q, exp, grants := redlock.QueueKeys(key)
	n, err := g.run(ctx, releaseFairScript, 4, key, q, exp, grants, token, flag, ticket, grant)
	return n == 1, err
}

// ReleaseFair on a cluster maps the key as Release does, and announces
// with SPUBLISH.
func (g *clusterNode) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.releaseFair(ctx, k, token, ticket, announce, "2")
	return ok, g.failed(err)
}

// AcquireFair on a cluster maps the key as Acquire does (clusterKey): the
// queue's names extend the mapped key, so they share its hash slot.
func (g *clusterNode) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	ok, ahead, err := g.node.AcquireFair(ctx, k, token, ttl, ticket, score, stay, attempt)
	return ok, ahead, g.failed(err)
}

// LeaveQueue on a cluster maps the key as Acquire does (clusterKey).
func (g *clusterNode) LeaveQueue(ctx context.Context, key, ticket string) error {
	k, err := clusterKey(key)
	if err != nil {
		return err
	}
	_, err = g.node.releaseFair(ctx, k, "", ticket, true, "2")
	return g.failed(err)
}

// NotifyGrants subscribes to the key's release channel and to
// redlock.GrantChannel(key, locker) through the node's hub, in one round.
func (g *node) NotifyGrants(ctx context.Context, key, locker string, granted func(payload string)) (func(), error) {
	return g.hub.notify(ctx, g.c, granted, redlock.ReleaseChannel(key), redlock.GrantChannel(key, locker))
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
	return g.slotHub(slot(k)).notify(ctx, g.c, granted, redlock.ReleaseChannel(k), redlock.GrantChannel(k, locker))
}
