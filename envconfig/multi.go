package envconfig

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// alwaysGrant also grants sets of keys (redlock.MultiLocker), so code
// written with LockMany and DoMany runs unchanged when locking is
// disabled; its fences come from the one counter, as for a single key.

var _ redlock.MultiLocker = (*alwaysGrant)(nil)

func (*alwaysGrant) AcquireMany(context.Context, []string, string, time.Duration) (bool, error) {
	return true, nil
}

func (g *alwaysGrant) AcquireManyFenced(_ context.Context, _ []string, _ string, _ time.Duration, fences []int64) (bool, error) {
	for i := range fences {
		fences[i] = g.fence.Add(1)
	}
	return true, nil
}

func (g *alwaysGrant) RaiseFences(ctx context.Context, _ []string, token string, fences []int64) (bool, error) {
	for _, f := range fences {
		if _, err := g.RaiseFence(ctx, "", token, f); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (*alwaysGrant) ReleaseMany(context.Context, []string, string, bool) (bool, error) {
	return true, nil
}

func (*alwaysGrant) ExtendMany(context.Context, []string, string, time.Duration) (bool, error) {
	return true, nil
}
