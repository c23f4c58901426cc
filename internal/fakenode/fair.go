package fakenode

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// The operations of redlock.FairQueuer a hook sees.
const (
	AcquireFair Op = "acquire fair"
	LeaveQueue  Op = "leave queue"
	ReleaseFair Op = "release fair"
)

// AcquireFair passes through the hook to the wrapped node, which must
// implement redlock.FairQueuer when it is used. The hook sees the ahead
// count only through what Send does; Result carries it in Fence.
func (n *Node) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	r := n.call(ctx, Call{Op: AcquireFair, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, ahead, err := n.inner.(redlock.FairQueuer).AcquireFair(ctx, key, token, ttl, ticket, score, stay, attempt)
		return Result{OK: ok, Fence: ahead, Err: err}
	}})
	return r.OK, r.Fence, r.Err
}

// LeaveQueue passes through the hook to the wrapped node. Token is the
// ticket.
func (n *Node) LeaveQueue(ctx context.Context, key, ticket string) error {
	r := n.call(ctx, Call{Op: LeaveQueue, Key: key, Token: ticket, send: func(ctx context.Context) Result {
		return Result{OK: true, Err: n.inner.(redlock.FairQueuer).LeaveQueue(ctx, key, ticket)}
	}})
	return r.Err
}

// ReleaseFair passes through the hook to the wrapped node.
func (n *Node) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	r := n.call(ctx, Call{Op: ReleaseFair, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.(redlock.FairQueuer).ReleaseFair(ctx, key, token, ticket, announce)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

// NotifyGrants is the wrapped node's; the hook does not see it.
func (n *Node) NotifyGrants(ctx context.Context, key, locker string, granted func(payload string)) (func(), error) {
	return n.inner.(redlock.FairQueuer).NotifyGrants(ctx, key, locker, granted)
}
