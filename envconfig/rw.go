package envconfig

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// alwaysGrant also grants read-write locks (redlock.RWLocker), so code
// written with RLock, WLock, DoRead and DoWrite runs unchanged when
// locking is disabled. A reader's fence is the counter's current value,
// a writer's the next one, as on a real node.

var _ redlock.RWLocker = (*alwaysGrant)(nil)

func (g *alwaysGrant) AcquireRead(context.Context, string, string, time.Duration) (bool, int64, error) {
	return true, g.fence.Load(), nil
}

func (g *alwaysGrant) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	return g.RaiseFence(ctx, key, token, fence)
}

func (*alwaysGrant) ReleaseRead(context.Context, string, string, bool) (bool, error) {
	return true, nil
}

func (*alwaysGrant) ExtendRead(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}

func (g *alwaysGrant) AcquireWrite(_ context.Context, _, _ string, _, _ time.Duration, fenced bool) (bool, int64, error) {
	if !fenced {
		return true, 0, nil
	}
	return true, g.fence.Add(1), nil
}
