package fakenode

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// The operations of redlock.RWLocker a hook sees.
const (
	AcquireRead    Op = "acquire read"
	RaiseReadFence Op = "raise read fence"
	ReleaseRead    Op = "release read"
	ExtendRead     Op = "extend read"
	AcquireWrite   Op = "acquire write"
)

// The RWLocker methods pass through the hook to the wrapped node, which
// must implement redlock.RWLocker when they are used.

func (n *Node) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	r := n.call(ctx, Call{Op: AcquireRead, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, f, err := n.inner.(redlock.RWLocker).AcquireRead(ctx, key, token, ttl)
		return Result{OK: ok, Fence: f, Err: err}
	}})
	return r.OK, r.Fence, r.Err
}

func (n *Node) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	r := n.call(ctx, Call{Op: RaiseReadFence, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.(redlock.RWLocker).RaiseReadFence(ctx, key, token, fence)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

func (n *Node) ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	r := n.call(ctx, Call{Op: ReleaseRead, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.(redlock.RWLocker).ReleaseRead(ctx, key, token, announce)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

func (n *Node) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := n.call(ctx, Call{Op: ExtendRead, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.(redlock.RWLocker).ExtendRead(ctx, key, token, ttl)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

func (n *Node) AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (bool, int64, error) {
	r := n.call(ctx, Call{Op: AcquireWrite, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, f, err := n.inner.(redlock.RWLocker).AcquireWrite(ctx, key, token, ttl, mark, fenced)
		return Result{OK: ok, Fence: f, Err: err}
	}})
	return r.OK, r.Fence, r.Err
}

var _ redlock.RWLocker = (*Node)(nil)
