package locktest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
)

// Primitive is one way to use a Redlock's nodes: it takes something and
// lets go of it, and returns the first error.
type Primitive struct {
	Name string
	Use  func(ctx context.Context, r *redlock.Redlock, key string) error
}

// unlocked releases what a call took.
func unlocked(l *redlock.Lock, err error) error {
	if err != nil {
		return err
	}
	return l.Unlock(context.Background())
}

// Primitives are every primitive of package redlock (Lock, Extend,
// Unlock, WithFencing, WithFairness, LockMany, RLock, WLock, Do, a
// Semaphore, an Election's Campaign, Leader and Resign), each taking and
// letting go of what it takes, and two paths of an adapter's own: concurrent calls on one node (the
// go-redis adapter batches them on a goroutine of its own) and a waiter,
// which subscribes to the key's releases (an adapter's pub/sub
// connection). Tests run each on one configuration and expect one
// behaviour: over a healthy quorum each returns nil; over a bad node
// alone, or one that refuses the client, an error.
var Primitives = []Primitive{
	{"Lock", func(ctx context.Context, r *redlock.Redlock, key string) error { return unlocked(r.Lock(ctx, key)) }},
	{"LockExtend", func(ctx context.Context, r *redlock.Redlock, key string) error {
		l, err := r.Lock(ctx, key)
		if err != nil {
			return err
		}
		return errors.Join(l.Extend(ctx, time.Second), l.Unlock(ctx))
	}},
	{"LockFenced", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return unlocked(r.Lock(ctx, key, redlock.WithFencing()))
	}},
	{"LockFair", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return unlocked(r.Lock(ctx, key, redlock.WithFairness(true)))
	}},
	{"LockMany", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return unlocked(r.LockMany(ctx, []string{key + ":a", key + ":b"}, redlock.WithFencing()))
	}},
	{"RLock", func(ctx context.Context, r *redlock.Redlock, key string) error { return unlocked(r.RLock(ctx, key)) }},
	{"WLock", func(ctx context.Context, r *redlock.Redlock, key string) error { return unlocked(r.WLock(ctx, key)) }},
	{"Do", func(ctx context.Context, r *redlock.Redlock, key string) error {
		return r.Do(ctx, key, func(context.Context) error { return nil })
	}},
	{"Semaphore", func(ctx context.Context, r *redlock.Redlock, key string) error {
		sm, err := redlock.NewSemaphore(r, key, 2)
		if err != nil {
			return err
		}
		return unlocked(sm.Acquire(ctx))
	}},
	{"Election", func(ctx context.Context, r *redlock.Redlock, key string) error {
		e, err := redlock.NewElection(r, key)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, patience(ctx)/2) // a campaign retries until its context ends
		defer cancel()
		lead, err := e.Campaign(cctx, "me")
		if err != nil {
			_, lerr := e.Leader(ctx) // read the nodes all the same
			return errors.Join(err, lerr)
		}
		_, err = e.Leader(ctx)
		return errors.Join(err, lead.Resign(ctx))
	}},
	{"Concurrent", func(ctx context.Context, r *redlock.Redlock, key string) error {
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = unlocked(r.Lock(ctx, key+":"+string(rune('a'+i)))) })
		}
		wg.Wait()
		for _, err := range errs {
			if err == nil {
				return nil // a Redlock with a healthy quorum: all of them; one tells
			}
		}
		return errors.Join(errs...)
	}},
	{"Waiter", func(ctx context.Context, r *redlock.Redlock, key string) error {
		holder, herr := r.Lock(ctx, key)
		if herr == nil {
			time.AfterFunc(50*time.Millisecond, func() { _ = holder.Unlock(context.Background()) })
		}
		// Refused (or failed), it subscribes to the key's releases before
		// it tries again, until the holder let go or its patience ran out.
		wctx, cancel := context.WithTimeout(ctx, patience(ctx))
		defer cancel()
		err := unlocked(r.Lock(wctx, key, redlock.WithStrategy(redlock.Retry(100, 50*time.Millisecond))))
		return errors.Join(herr, err)
	}},
}

type patienceKey struct{}

// WithPatience sets how long the primitives that wait (Waiter; Election,
// half of it) wait, in the context they are used with: a second when
// unset. Tests with a long node timeout give them more.
func WithPatience(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, patienceKey{}, d)
}

func patience(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(patienceKey{}).(time.Duration); ok {
		return d
	}
	return time.Second
}
