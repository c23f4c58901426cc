package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/quorumlock/redlock"
)

// fenceKey is the context key under which fencing.Do puts the token.
type fenceKey struct{}

// fenceFrom returns the fencing token of the lock that the request holds,
// and false outside fencing.Do.
func fenceFrom(ctx context.Context) (int64, bool) {
	f, ok := ctx.Value(fenceKey{}).(int64)
	return f, ok
}

// fencing is a Locker whose Do gives fn the lock's fencing token in its
// context (fenceFrom), so that a handler behind httplock's middleware can
// send the token with its writes. The token is issued when the options ask
// for it (redlock.WithFencing); without it, it is 0.
//
// redlock's own Do does not hand fn its *Lock, so Do here is made of the
// same public steps: Lock with a heartbeat (WithAutoRenew), fn under a
// context cancelled with a cause matching redlock.ErrLockLost when the
// lock is lost (Lost closes), and Unlock however fn ends, detached from
// the request's cancellation. Its errors are Do's: the acquisition's, or
// fn's joined with ErrLockLost when the lock was lost or had expired by
// the time of the release.
type fencing struct{ redlock.Locker }

func (f fencing) Do(ctx context.Context, key string, fn func(context.Context) error, opts ...redlock.Option) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: nil function", redlock.ErrInvalid)
	}
	l, err := f.Lock(ctx, key, append(slices.Clip(opts), redlock.WithAutoRenew())...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, fenceKey{}, l.Fence()))
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-l.Lost():
			cancel(fmt.Errorf("%w: %q (fencing token %d)", redlock.ErrLockLost, key, l.Fence()))
		case <-stop:
		}
	}()
	defer func() { // also while fn panics: the lock is released, then the panic goes on
		close(stop)
		<-watched
		lost := false
		select {
		case <-l.Lost(): // before Unlock, which closes it too
			lost = true
		default:
		}
		cancel(nil)
		uerr := l.Unlock(context.WithoutCancel(ctx))
		switch {
		case lost:
			err = errors.Join(fmt.Errorf("%w: %q", redlock.ErrLockLost, key), err)
		case errors.Is(uerr, redlock.ErrNotHeld):
			err = errors.Join(fmt.Errorf("%w: %w", redlock.ErrLockLost, uerr), err)
		}
	}()
	return fn(fctx)
}
