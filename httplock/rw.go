package httplock

import (
	"context"
	"net/http"
)

// WithReadLocks makes safe requests (GET, HEAD) take a reader's share of
// the record's lock (redlock's DoRead) instead of running unlocked: any
// number of them run together, never beside a write to the record. The
// requests that lock (see WithMethods) then take it as the writer
// (DoWrite), so a waiting write makes new reads wait behind it and a
// stream of reads cannot starve it. For an application whose reads must
// not see a write in progress (a read of several rows that a write
// changes together); most reads need no lock. It is for New's one record
// per request: NewMany returns an error matching redlock.ErrInvalid.
func WithReadLocks() Option {
	return func(m *Middleware) error {
		m.rw = m.locker
		return nil
	}
}

// reads reports whether a request with this method takes a read lock.
func (m *Middleware) reads(method string) bool {
	return m.rw != nil && (method == http.MethodGet || method == http.MethodHead)
}

// doKey runs run holding key: a reader's share for a read, the writer's
// lock with WithReadLocks, the mutex otherwise.
func (m *Middleware) doKey(ctx context.Context, key string, read bool, run func(context.Context) error) error {
	switch {
	case read:
		return m.rw.DoRead(ctx, key, run, m.lockOpts...)
	case m.rw != nil:
		return m.rw.DoWrite(ctx, key, run, m.lockOpts...)
	}
	return m.locker.Do(ctx, key, run, m.lockOpts...)
}
