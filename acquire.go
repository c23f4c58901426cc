package redlock

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// acquire is the strategy engine shared by Single and Redlock: attempt,
// and on contention or unavailability ask the strategy whether and how
// long to wait before the next attempt.
func acquire(ctx context.Context, nodes []Backend, base config, key string, opts []Option) (*Lock, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	if key == "" {
		return nil, invalidf("empty key")
	}
	cfg := base.with(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	token := uuid.NewString()
	dirty := make([]bool, len(nodes))
	for retry := 0; ; retry++ {
		lock, err := attempt(ctx, nodes, &cfg, key, token, dirty)
		if err == nil {
			return lock, nil
		}
		if ctx.Err() != nil {
			return nil, cancelled(ctx, err)
		}
		delay, ok := cfg.strategy.Backoff(retry)
		if !ok {
			return nil, exhausted(retry+1, err)
		}
		select {
		case <-ctx.Done():
			return nil, cancelled(ctx, err)
		case <-cfg.clock.After(delay):
		}
	}
}

// attempt tries once on every node: quorum and positive validity grant the
// lock. Anything less is rolled back at once on every node that granted or
// may have: those that agreed, and those that failed or timed out in this
// or an earlier attempt of the same call (their SET may land late). A node
// that answered no held someone else's key at that moment, so it cannot
// hold ours and is left alone; dirty carries that knowledge across
// attempts.
func attempt(ctx context.Context, nodes []Backend, cfg *config, key, token string, dirty []bool) (*Lock, error) {
	start := cfg.clock.Now()
	r := fanOut(ctx, nodes, cfg.timeout(), ErrNotAcquired, func(ctx context.Context, b Backend) (bool, error) {
		return b.Acquire(ctx, key, token, cfg.ttl)
	})
	drift := cfg.drift()
	left := validity(cfg.ttl, cfg.clock.Now().Sub(start), drift)
	if r.granted >= quorum(len(nodes)) && left > 0 && ctx.Err() == nil {
		return &Lock{key: key, token: token, nodes: nodes, cfg: *cfg, until: start.Add(cfg.ttl - drift)}, nil
	}
	var rollback []Backend
	for i, err := range r.errs {
		dirty[i] = dirty[i] || err != ErrNotAcquired
		if dirty[i] {
			rollback = append(rollback, nodes[i])
		}
	}
	if len(rollback) > 0 {
		releaseAll(ctx, rollback, cfg.timeout(), key, token)
	}
	return nil, r.quorumError("acquire", key, left)
}

// cancelled wraps the last attempt's error when ctx ended while waiting:
// the result matches ErrNotAcquired, the context's error, and whatever the
// last attempt matched.
func cancelled(ctx context.Context, last error) error {
	return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotAcquired, context.Cause(ctx), last)
}

// exhausted is the error after the strategy gave up. Contention becomes
// ErrTimeout when there were retries; unavailability stays ErrUnavailable.
func exhausted(attempts int, last error) error {
	if attempts == 1 {
		return last
	}
	if qe, ok := last.(*QuorumError); ok && qe.Unwrap() == ErrNotAcquired {
		return fmt.Errorf("%w after %d attempts: %w", ErrTimeout, attempts, last)
	}
	return fmt.Errorf("redlock: gave up after %d attempts: %w", attempts, last)
}
