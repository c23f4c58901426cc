package redlock

import "context"

// Single locks on one Redis master: the simplest correct lock, and the
// right one when that master's availability is enough. The lock dies with
// the master; use Redlock to survive a lost node.
type Single struct {
	locker // exactly one node
}

// NewSingle returns a locker on one node. opts are the defaults for every
// Lock.
func NewSingle(b Backend, opts ...Option) (*Single, error) {
	nodes := []Backend{b}
	cfg, err := setup(nodes, opts)
	if err != nil {
		return nil, err
	}
	return &Single{locker{nodes: nodes, cfg: cfg}}, nil
}

// Lock acquires key with SET key token NX PX ttl. Validity is computed as
// for a Redlock of one node, so Until is never later than the key's real
// expiry.
func (s *Single) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return s.lock(ctx, key, opts)
}

// Do runs fn while holding key: it acquires the lock (following the
// strategy), runs fn with a context derived from ctx, and releases the
// lock when fn returns, panics, or gives up after its context was
// cancelled. See Locker.Do for the heartbeat and what a lost lock does.
func (s *Single) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	return s.do(ctx, key, fn, opts)
}
