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
	if g.w != nil {
		return fairReply(scriptInt(g.w.do(ctx, acquireFairCommand(key, token, ttl, ticket, score, stay, attempt))))
	}
	q, exp, grants := redlock.QueueKeys(key)
	n, wait, err := g.exec(ctx, true, acquireFairScript, 4, key, q, exp, grants, token, ttl.Milliseconds(), ticket, score, stay.Milliseconds(), attempt)
	if ok, ahead, err := fairReply(n, err); !ok || err != nil {
		return ok, ahead, err
	}
	if err := g.acked(wait); err != nil {
		return false, 0, err // made, maybe lost in a failover: may have happened
	}
	return true, 0, nil
}

// fairReply is AcquireFair's answer to FairLua.Acquire's reply n: 1 if it
// set the key, otherwise minus the number of entries ahead.
func fairReply(n int64, err error) (bool, int64, error) {
	switch {
	case err != nil:
		return false, 0, err
	case n == 1:
		return true, 0, nil
	}
	return false, -n, nil
}

// StartAcquireFair sends AcquireFair's script on the node's own connection
// and returns at once (redlock.FairStarter).
func (g *wireNode) StartAcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) redlock.FairPending {
	return g.w.start(ctx, acquireFairCommand(key, token, ttl, ticket, score, stay, attempt))
}

// StartReleaseFair sends ReleaseFair's script on the node's own
// connection and returns at once (redlock.FairStarter). A grant to a
// waiter of the releasing ticket's own locker is not announced: the
// Pending's FinishGrant returns it (redlock.GrantPending).
func (g *wireNode) StartReleaseFair(ctx context.Context, key, token, ticket string, announce bool) redlock.Pending {
	cmd := releaseFairCommand(key, token, ticket, announce, "1")
	cmd.hands = true
	return g.w.start(ctx, cmd)
}

func acquireFairCommand(key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) command {
	return command{op: opScript, s: &acquireFairScript, queued: true, key: key, token: token, n: ttl.Milliseconds(),
		ticket: ticket, score: score, stay: stay.Milliseconds(), attempt: attempt}
}

// releaseFairCommand is FairLua.Release on the node's own connection, with
// the grant flag of a node without WithReplicaAck (which has no such
// connection).
func releaseFairCommand(key, token, ticket string, announce bool, publish string) command {
	flag := "0"
	if announce {
		flag = publish
	}
	return command{op: opScript, s: &releaseFairScript, queued: true, key: key, token: token, flag: flag, ticket: ticket, grant: "1"}
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
	if g.w != nil {
		kind, n, err := g.w.do(ctx, releaseFairCommand(key, token, ticket, announce, publish))
		return replyBool(opScript, kind, n, err)
	}
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
