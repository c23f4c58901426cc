package redlock

import (
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/hashslot"
)

// node is one driver.Node as the rounds use it: its Info, read once, and
// its Subscriber, nil when it cannot deliver release announcements.
type node struct {
	driver.Node
	info  driver.Info
	sub   driver.Subscriber
	index int // its place among its locker's nodes
}

// newNodes checks a locker's nodes and wraps them: at least one, none nil,
// each named, no name twice (one server counted twice would fake a
// quorum).
func newNodes(ds []driver.Node) ([]*node, error) {
	if len(ds) == 0 {
		return nil, invalidf("no nodes")
	}
	nodes := make([]*node, len(ds))
	seen := make(map[string]int, len(ds))
	for i, d := range ds {
		if d == nil {
			return nil, invalidf("node %d is nil", i)
		}
		n := &node{Node: d, info: d.Info(), index: i}
		n.sub, _ = d.(driver.Subscriber)
		if n.info.Name == "" {
			return nil, invalidf("node %d (%T) has no name", i, d)
		}
		if j, dup := seen[n.info.Name]; dup {
			return nil, invalidf("nodes %d and %d are the same node %q", j, i, n.info.Name)
		}
		seen[n.info.Name] = i
		nodes[i] = n
	}
	return nodes, nil
}

// name is the node's name, for errors and events.
func (n *node) name() string { return n.info.Name }

// keyOf maps a lock key to the name the node keeps it under: the key
// itself, or on a Redis Cluster a key that hashes to one slot with every
// name derived from it (its fence counter, queue, readers and release
// channel): a key with a hash tag as it is, one without wrapped in braces
// ("order:42" is "{order:42}"). A key that cannot be mapped (an empty
// tag) is refused, matching ErrInvalid.
func (n *node) keyOf(key string) (string, error) {
	if !n.info.Cluster {
		return key, nil
	}
	k, err := hashslot.Key(key)
	if err != nil {
		return "", fmt.Errorf("%w: node %q is a Redis Cluster: %w", ErrInvalid, n.name(), err)
	}
	return k, nil
}

// keysOf maps a set of lock keys as keyOf maps one, and refuses, on a
// Redis Cluster, a set whose keys land in more than one hash slot.
func (n *node) keysOf(keys []string) ([]string, error) {
	if !n.info.Cluster {
		return keys, nil
	}
	ks, err := hashslot.Keys(keys)
	if err != nil {
		return nil, fmt.Errorf("%w: node %q is a Redis Cluster: %w", ErrInvalid, n.name(), err)
	}
	return ks, nil
}

// announce is the scripts' announcement flag: "1" to PUBLISH a release,
// "2" to SPUBLISH it (a Redis Cluster, where the channel shares the
// key's slot), "0" not to announce.
func (n *node) announce(on bool) string {
	switch {
	case !on:
		return "0"
	case n.info.Cluster:
		return "2"
	}
	return "1"
}

// releaseChannel is the pub/sub channel on which a release of key (as the
// node names it, keyOf) is announced. Operators can watch a lock with
// SUBSCRIBE on it.
func releaseChannel(key string) string { return "redlock:released:" + key }

// grantChannel is the channel on which a fair release announces a grant
// to, or names, a waiter of locker (release_fair.lua).
func grantChannel(key, locker string) string { return releaseChannel(key) + ":" + locker }

// ms is a duration in whole milliseconds, as the scripts take TTLs.
func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// A badReply is a node's answer of a type or value that the script
// cannot have sent: a node that answers garbage (a corrupted stream, not
// a Redis server) costs its vote in the round, like one that fails.
type badReply struct {
	script string
	reply  any
}

func (e *badReply) Error() string {
	return fmt.Sprintf("redlock: node answered %s with %s", e.script, shorten(fmt.Sprintf("%T %v", e.reply, e.reply)))
}

// integer reads a script's integer reply.
func integer(s *driver.Script, r any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	n, ok := r.(int64)
	if !ok {
		return 0, &badReply{s.Name(), r}
	}
	return n, nil
}

// yes reads a script's 1 or 0 reply.
func yes(s *driver.Script, r any, err error) (bool, error) {
	n, err := integer(s, r, err)
	if err != nil {
		return false, err
	}
	if n != 0 && n != 1 {
		return false, &badReply{s.Name(), r}
	}
	return n == 1, nil
}

// integers reads a script's array of integers.
func integers(s *driver.Script, r any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	a, ok := r.([]any)
	if !ok {
		return nil, &badReply{s.Name(), r}
	}
	out := make([]int64, len(a))
	for i, v := range a {
		if out[i], ok = v.(int64); !ok {
			return nil, &badReply{s.Name(), r}
		}
	}
	return out, nil
}
