package goredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/go-redis/v9"
)

// Option adjusts New.
type Option func(*options)

type options struct {
	failover    *redis.FailoverOptions
	failoverSet bool
	ackSet      bool
	ackN        int
	ackTimeout  time.Duration
}

// WithFailover tells New that redis.NewFailoverClient(opts) made the
// client: one node, a master found through Sentinel, named "sentinel[" +
// opts.MasterName + "@" + the sentinels, sorted + "]" whichever server is
// master. New needs it for a failover client, and refuses
// (redlock.ErrInvalid) options naming no master or no sentinel.
func WithFailover(opts *redis.FailoverOptions) Option {
	return func(o *options) { o.failover, o.failoverSet = opts, true }
}

// WithReplicaAck makes every script call wait, for at most timeout, until
// numReplicas replicas of its master acknowledge its writes: the script and
// "WAIT numReplicas timeout" go out as one pipeline, never resent (on a
// cluster, to the master of the first key's slot). A call too few replicas
// acknowledged fails with ErrReplicaAck, though its script ran; the lockers
// count the vote as failed and roll back. A failover to a replica that
// acknowledged keeps the lock; docs/backends.md says what WAIT does not
// guarantee. timeout must be at least a millisecond and well inside the
// lockers' per-node timeout; New refuses numReplicas < 1 or a shorter
// one, with redlock.ErrInvalid.
func WithReplicaAck(numReplicas int, timeout time.Duration) Option {
	return func(o *options) { o.ackSet, o.ackN, o.ackTimeout = true, numReplicas, timeout }
}

// ErrReplicaAck is matched by the error of a script call that too few
// replicas acknowledged in time (WithReplicaAck).
var ErrReplicaAck = errors.New("goredis: too few replicas acknowledged the write")

// failoverAddr is the address go-redis gives a failover client.
const failoverAddr = "FailoverClient"

// name names the node (see New and WithFailover).
func (o *options) name(c redis.UniversalClient) (string, error) {
	rc, isClient := c.(*redis.Client)
	isFailover := isClient && rc.Options().Addr == failoverAddr
	switch {
	case o.failoverSet && o.failover == nil:
		return "", fmt.Errorf("%w: goredis.New: WithFailover(nil): pass the failover client's options",
			redlock.ErrInvalid)
	case o.failover == nil && isFailover:
		return "", fmt.Errorf("%w: goredis.New: a failover client (redis.NewFailoverClient) needs goredis.WithFailover(opts) with its options, to be named after its master and sentinels",
			redlock.ErrInvalid)
	case o.failover == nil:
		return clientName(c), nil
	case !isFailover:
		return "", fmt.Errorf("%w: goredis.New: WithFailover for a client that redis.NewFailoverClient did not make (%s)",
			redlock.ErrInvalid, clientName(c))
	case o.failover.MasterName == "" || len(o.failover.SentinelAddrs) == 0:
		return "", fmt.Errorf("%w: goredis.New: WithFailover: the options name no master or no sentinel",
			redlock.ErrInvalid)
	}
	addrs := slices.Compact(slices.Sorted(slices.Values(o.failover.SentinelAddrs)))
	return fmt.Sprintf("sentinel[%s@%s]", o.failover.MasterName, strings.Join(addrs, " ")), nil
}

// replicaAck is WithReplicaAck's WAIT, checked.
type replicaAck struct {
	n       int
	timeout time.Duration
	name    string
}

func (o *options) replicaAck(name string) (*replicaAck, error) {
	if !o.ackSet {
		return nil, nil
	}
	if o.ackN < 1 || o.ackTimeout < time.Millisecond {
		return nil, fmt.Errorf("%w: goredis.New: node %q: WithReplicaAck(%d, %v): want at least one replica and a timeout of at least 1ms",
			redlock.ErrInvalid, name, o.ackN, o.ackTimeout)
	}
	return &replicaAck{n: o.ackN, timeout: o.ackTimeout, name: name}, nil
}

// process runs cmd and a WAIT as one pipeline, and returns cmd's error, or
// one matching ErrReplicaAck when too few replicas acknowledged.
func (a *replicaAck) process(ctx context.Context, n *Node, keys []string, cmd redis.Cmder) error {
	var key string
	if len(keys) > 0 {
		key = keys[0]
	}
	// A cluster's pipelines spread commands by key; WAIT has none.
	var pipe redis.Pipeliner
	if cc, ok := n.c.(*redis.ClusterClient); ok {
		master, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return fmt.Errorf("goredis: node %s: the master of key %q: %w", a.name, key, err) // nothing sent
		}
		pipe = master.Pipeline()
	} else {
		pipe = n.c.Pipeline()
	}
	wait := redis.NewIntCmd(ctx, "wait", a.n, a.timeout.Milliseconds())
	_ = pipe.Process(ctx, sendOnce{cmd}) // a pipeline holding it is not resent
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // each command carries its own result
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	got, err := wait.Result()
	if err != nil {
		return fmt.Errorf("%w: node %s: WAIT %d %d: %w", ErrReplicaAck, a.name, a.n, a.timeout.Milliseconds(), err)
	}
	if got < int64(a.n) {
		return fmt.Errorf("%w: node %s: %d of %d replicas within %v", ErrReplicaAck, a.name, got, a.n, a.timeout)
	}
	return nil
}
