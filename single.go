package redlock

import "github.com/quorumlock/redlock/driver"

// NewSingle returns a locker on one Redis master: the simplest correct
// lock, and the right one when that master's availability is enough. The
// lock dies with the master; New over several masters survives a lost
// node. It is the Redlock of one node, so Until is never later than the
// key's real expiry.
func NewSingle(n driver.Node, opts ...Option) (*Redlock, error) {
	return New([]driver.Node{n}, opts...)
}
