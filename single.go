package redlock

import "context"

// Single locks on one Redis master: the simplest correct lock, and the
// right one when that master's availability is enough. The lock dies with
// the master; use Redlock to survive a lost node.
type Single struct {
	nodes []Backend // exactly one
	cfg   config
}

// NewSingle returns a locker on one node. opts are the defaults for every
// Lock.
func NewSingle(b Backend, opts ...Option) (*Single, error) {
	nodes := []Backend{b}
	cfg, err := setup(nodes, opts)
	if err != nil {
		return nil, err
	}
	return &Single{nodes: nodes, cfg: cfg}, nil
}

// Lock acquires key with SET key token NX PX ttl. Validity is computed as
// for a Redlock of one node, so Until is never later than the key's real
// expiry.
func (s *Single) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return acquire(ctx, s.nodes, s.cfg, key, opts)
}
