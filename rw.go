package redlock

import (
	"context"
	"time"
)

// Read-write locks (RLock, WLock, DoRead, DoWrite): any number of readers
// or one writer per key, with everything the mutex has (quorum and
// validity, rollback, Extend and renewal, fencing, hand-off, the
// observer). Readers and writers are two more targets (target.go) on the
// same rounds as the mutex.
//
// On each node one script per call (RWLocker) keeps the readers, each
// with its own token and deadline, and the writer. The lock key itself
// holds the writer's token, or a marker while readers hold, so the key
// exists exactly while someone holds it: a writer is a mutex on the key,
// and a plain Lock (or LockMany) of the same key excludes readers and
// writers alike; it is a writer that does not ask for preference.
//
// Quorum: a reader and a writer, or two writers, each granted by a
// majority of the nodes, would share a node that granted both while both
// were live; that node refuses whichever came second (a live reader or
// writer makes the key exist, and a writer's SET NX fails; a writer's
// token in the key makes a reader's script refuse). So as for the mutex,
// at most one writer holds, and never together with a reader, within the
// validity of each. Readers do not exclude each other: any number of
// them can hold on the same majority.
//
// Writer preference: a writer refused on a node leaves a "writer waiting"
// mark there with a TTL of the lock's TTL, refreshed by each refused
// attempt and deleted when a writer is granted. New readers are refused
// while it exists, so a stream of readers cannot starve a writer: the
// readers that hold finish (or expire), the last one's release announces,
// and the writer takes the key. A writer that gives up or dies leaves a
// mark that ends on its own within a TTL. The mark lasts one TTL after
// the writer's latest attempt, so a writer whose backoff delays exceed
// its TTL lets new readers in between its attempts.

// ReadWriteLocker is a Locker that also takes read-write locks. *Single
// and *Redlock implement it (an interface of its own, like KeySetLocker,
// so that other implementations of Locker keep compiling).
type ReadWriteLocker interface {
	Locker

	// RLock acquires a reader's share of key: granted while no writer
	// (nor a mutex) holds key and no writer waits for it; any number of
	// readers hold at once, each with its own token and expiry. A node
	// that is not an RWLocker is an error matching ErrInvalid. Otherwise
	// it is Lock: the same strategy, errors and options (Extend,
	// WithAutoRenew, hand-off). With WithFencing a reader's Fence is the
	// generation of the latest fenced writer granted before it (0 if
	// none), not a number of its own: a store that saw a writer's
	// token can tell a reader that started before that writer.
	RLock(ctx context.Context, key string, opts ...Option) (*Lock, error)

	// WLock acquires key as the writer: granted while no reader, writer
	// or mutex holds it. A refused writer makes new readers wait for it
	// (writer preference). With WithFencing its Fence is strictly greater
	// than every earlier writer's (and mutex's) on key.
	WLock(ctx context.Context, key string, opts ...Option) (*Lock, error)

	// DoRead is Do with a reader's share of key (RLock).
	DoRead(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error

	// DoWrite is Do as key's writer (WLock).
	DoWrite(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error
}

var (
	_ ReadWriteLocker = (*Single)(nil)
	_ ReadWriteLocker = (*Redlock)(nil)
)

// RLock acquires a reader's share of key; see ReadWriteLocker.RLock.
func (s *Single) RLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return s.lockAs(ctx, reader{}, key, opts)
}

// WLock acquires key as its writer; see ReadWriteLocker.WLock.
func (s *Single) WLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return s.lockAs(ctx, writer{}, key, opts)
}

// DoRead runs fn with a reader's share of key; see ReadWriteLocker.
func (s *Single) DoRead(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return s.doAs(ctx, reader{}, key, fn, opts)
}

// DoWrite runs fn as key's writer; see ReadWriteLocker.
func (s *Single) DoWrite(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return s.doAs(ctx, writer{}, key, fn, opts)
}

// RLock acquires a reader's share of key on a quorum of the nodes; see
// ReadWriteLocker.RLock.
func (r *Redlock) RLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return r.lockAs(ctx, reader{}, key, opts)
}

// WLock acquires key as its writer on a quorum of the nodes; see
// ReadWriteLocker.WLock.
func (r *Redlock) WLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return r.lockAs(ctx, writer{}, key, opts)
}

// DoRead runs fn with a reader's share of key; see ReadWriteLocker.
func (r *Redlock) DoRead(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return r.doAs(ctx, reader{}, key, fn, opts)
}

// DoWrite runs fn as key's writer; see ReadWriteLocker.
func (r *Redlock) DoWrite(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return r.doAs(ctx, writer{}, key, fn, opts)
}

// lockAs is lock for a reader or a writer.
func (lk *locker) lockAs(ctx context.Context, what target, key string, opts []Option) (*Lock, error) {
	s, err := lk.prepareRW(ctx, what, key, opts)
	if err != nil {
		return nil, err
	}
	return lockScope(ctx, s)
}

// doAs is do for a reader or a writer.
func (lk *locker) doAs(ctx context.Context, what target, key string, fn func(context.Context) error, opts []Option) error {
	if fn == nil {
		return invalidf("nil function")
	}
	s, err := lk.prepareRW(ctx, what, key, opts)
	if err != nil {
		return err
	}
	return doScope(ctx, s, fn)
}

// prepareRW is prepare for a reader or a writer: every node must be an
// RWLocker.
func (lk *locker) prepareRW(ctx context.Context, what target, key string, opts []Option) (scope, error) {
	s, err := lk.prepare(ctx, key, opts)
	if err != nil {
		return scope{}, err
	}
	if b := lacking[RWLocker](lk.nodes); b != nil {
		return scope{}, invalidf("read-write lock: node %q (%T) does not implement RWLocker", b.Name(), b)
	}
	s.what = what
	return s, nil
}

// reader is a reader's share of s.key: the RWLocker's read methods.
type reader struct{}

func (reader) acquire(ctx context.Context, s scope, b Backend, token string) (bool, error) {
	ok, _, err := b.(RWLocker).AcquireRead(ctx, s.key, token, s.cfg.ttl)
	return ok, err
}

func (reader) acquireFenced(ctx context.Context, s scope, b Backend, token string, fences []int64) (bool, error) {
	ok, f, err := b.(RWLocker).AcquireRead(ctx, s.key, token, s.cfg.ttl)
	fences[0] = f
	return ok, err
}

func (reader) raiseFence(ctx context.Context, s scope, b Backend, token string, fences []int64) (bool, error) {
	return b.(RWLocker).RaiseReadFence(ctx, s.key, token, fences[0])
}

func (reader) release(ctx context.Context, s scope, b Backend, token string, announce bool) (bool, error) {
	return b.(RWLocker).ReleaseRead(ctx, s.key, token, announce)
}

func (reader) extend(ctx context.Context, s scope, b Backend, token string, ttl time.Duration) (bool, error) {
	return b.(RWLocker).ExtendRead(ctx, s.key, token, ttl)
}

// notify: a refused reader waits for a writer's release, which announces
// on the key's channel like a mutex's.
func (reader) notify(ctx context.Context, s scope, n Notifier, released func(string)) (func(), error) {
	return n.Notify(ctx, s.key, released)
}

// writer is s.key's writer: a mutex on the key (oneKey) whose acquire
// leaves the "writer waiting" mark when refused.
type writer struct{ oneKey }

func (writer) acquire(ctx context.Context, s scope, b Backend, token string) (bool, error) {
	ok, _, err := b.(RWLocker).AcquireWrite(ctx, s.key, token, s.cfg.ttl, waitingMark(s.cfg), false)
	return ok, err
}

func (writer) acquireFenced(ctx context.Context, s scope, b Backend, token string, fences []int64) (bool, error) {
	ok, f, err := b.(RWLocker).AcquireWrite(ctx, s.key, token, s.cfg.ttl, waitingMark(s.cfg), true)
	fences[0] = f
	return ok, err
}

// waitingMark is how long a refused writer's "writer waiting" mark lasts:
// the lock's TTL, or nothing for a writer that will not try again
// (Reject, Retry with no retries), which must not keep readers out.
func waitingMark(cfg *config) time.Duration {
	if _, again := cfg.strategy.Backoff(0); !again {
		return 0
	}
	return cfg.ttl
}
