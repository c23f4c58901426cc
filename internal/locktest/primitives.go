package locktest

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// Primitive is one way to use a Redlock's nodes; Use returns what they
// answered.
type Primitive struct {
	Name string
	Use  func(ctx context.Context, r *redlock.Redlock, key string) error
}

// releasing runs a call that returns a lock, and releases the lock.
func releasing(lock *redlock.Lock, err error) error {
	if err != nil {
		return err
	}
	return lock.Unlock(context.Background())
}

// Primitives are every primitive of package redlock, each taking and
// letting go of what it takes: a test runs each on one configuration and
// expects one behaviour.
var Primitives = []Primitive{
	{"Lock", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return releasing(r.Lock(ctx, key))
	}},
	{"Lock+Extend", func(ctx context.Context, r *redlock.Redlock, key string) error {
		lock, err := r.Lock(ctx, key)
		if err != nil {
			return err
		}
		if err := lock.Extend(ctx, time.Second); err != nil {
			return err
		}
		return lock.Unlock(ctx)
	}},
	{"Lock fenced", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return releasing(r.Lock(ctx, key, redlock.WithFencing()))
	}},
	{"Lock fair", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return releasing(r.Lock(ctx, key, redlock.WithFairness(true)))
	}},
	{"LockMany", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return releasing(r.LockMany(ctx, []string{key + ":a", key + ":b"}))
	}},
	{"RLock", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return releasing(r.RLock(ctx, key))
	}},
	{"WLock", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return releasing(r.WLock(ctx, key))
	}},
	{"Do", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return r.Do(ctx, key, func(context.Context) error { return nil })
	}},
	{"Semaphore", func(ctx context.Context, r *redlock.Redlock, key string) error {
		sm, err := redlock.NewSemaphore(r, key, 2)
		if err != nil {
			return err
		}
		return releasing(sm.Acquire(ctx))
	}},
	{"Election", func(ctx context.Context, r *redlock.Redlock, key string) error {
		e, err := redlock.NewElection(r, key)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // a campaign retries until its context ends
		defer cancel()
		lead, err := e.Campaign(ctx, "me")
		if err != nil {
			return err
		}
		if _, err := e.Leader(ctx); err != nil {
			return err
		}
		return lead.Resign(ctx)
	}},
}
