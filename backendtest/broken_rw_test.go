package backendtest_test

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// The wrapper's RWLocker methods: passed on to the adapter, except that
// "reader-ignores-writer" deletes the writer-waiting mark before a
// reader's acquire, so a waiting writer no longer holds readers back.

func (w *wrapper) rw() redlock.RWLocker { return w.Backend.(redlock.RWLocker) }

func (w *wrapper) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	if w.kind == "reader-ignores-writer" {
		if err := w.c.Del(ctx, key+":writer-waiting").Err(); err != nil {
			return false, 0, err
		}
	}
	return w.rw().AcquireRead(w.ctx(ctx), key, token, ttl)
}

func (w *wrapper) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	return w.rw().RaiseReadFence(w.ctx(ctx), key, token, fence)
}

func (w *wrapper) ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	return w.rw().ReleaseRead(w.ctx(ctx), key, token, announce)
}

func (w *wrapper) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return w.rw().ExtendRead(w.ctx(ctx), key, token, ttl)
}

func (w *wrapper) AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (bool, int64, error) {
	return w.rw().AcquireWrite(w.ctx(ctx), key, token, ttl, mark, fenced)
}

var _ redlock.RWLocker = (*wrapper)(nil)
