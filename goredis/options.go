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
	failover   *redis.FailoverOptions
	ackSet     bool
	ackN       int
	ackTimeout time.Duration
	clientPool bool
	poll       *time.Duration // WithReplyPoll; nil: defaultReplyPoll
}

// WithClientPool sends every command of the node through the go-redis
// client, as pipelines of its pool, instead of over the node's own
// connection (see New): the client's hooks (tracing, metrics, logging
// added with AddHook) then see the lock commands too, and the node opens
// no connection of its own. The price is go-redis's per-command cost,
// about eleven allocations and a connection check per command, and a
// goroutine per node in every round of a Redlock: on the test machine a
// Lock+Unlock took 10–20 % longer (BENCHMARKS.md, "Our own connection").
func WithClientPool() Option {
	return func(o *options) { o.clientPool = true }
}

// WithReplyPoll sets how long a call on the node's own connection looks
// for its reply before it parks, when it is the only call of the process
// waiting for a node (replypoll.go has the whole policy): 50 µs unless
// set, 0 never. Looking keeps the calling thread busy, yielding its core
// to others between looks, for at most d per call; a node that answers
// slower than d makes the connection look less and less often (after a
// look runs out it skips the next 1, 2, 4 ... up to 64 calls). The pay:
// a round trip that does not wait for an idle core to wake, on the test
// machine a Lock+Unlock at one node in 62 µs instead of 121
// (BENCHMARKS.md, "Polling for the reply"). Set 0 where every core's
// idle time matters more than a lock's latency. It applies only where
// the node has a connection of its own (see New: not WithClientPool, not
// a cluster, not a failover client), and only on Linux (not linux/386).
// A look never outlasts the call's deadline. New refuses a negative d,
// and one over a millisecond (longer than any wake-up it could spare),
// with redlock.ErrInvalid.
func WithReplyPoll(d time.Duration) Option {
	return func(o *options) { o.poll = &d }
}

// pollFor is WithReplyPoll's time, or its default.
func (o *options) pollFor() time.Duration {
	if o.poll == nil {
		return defaultReplyPoll
	}
	return *o.poll
}

// WithFailover tells New that the client was made by
// redis.NewFailoverClient(opts): a master found through Redis Sentinel,
// one node of a lock whichever server is its master at the moment. The
// node is named "sentinel[" + opts.MasterName + "@" + the sentinel
// addresses sorted, space-separated + "]", which stays the same across
// failovers. Two failover clients of one master with the same sentinel
// addresses (in any order) are then one node, and a Redlock refuses them
// as duplicates; give every client of a master the same sentinel list,
// and never list its master or replicas as standalone nodes too.
//
// It is required for a failover client: go-redis gives such a client the
// address "FailoverClient" and keeps the master name and sentinels to
// itself, so New refuses a failover client without WithFailover (with
// redlock.ErrInvalid), rather than naming every one "FailoverClient".
// opts must name the master and at least one sentinel.
//
// A failover moves a lock only as far as replication carried it: see
// WithReplicaAck.
func WithFailover(opts *redis.FailoverOptions) Option {
	return func(o *options) { o.failover = opts }
}

// WithReplicaAck makes every write that grants or keeps a lock (Acquire,
// AcquireFenced, Extend, RaiseFence) wait until numReplicas replicas of
// the server that ran it acknowledge it, for at most timeout: the write
// and "WAIT numReplicas timeout" go out together as one pipeline, never
// resent, so WAIT runs on the connection that carried the write and
// counts the replicas that have it. A write that succeeded but that fewer
// replicas acknowledged in time returns an error matching ErrReplicaAck:
// the lockers count the node's vote as failed, and roll back an
// acquisition there, as after any error (the key may be set on the
// master).
//
// The node may be one master, a failover client (WithFailover) or a
// Redis Cluster: there the write and its WAIT go to the master that owns
// the key's slot, as the client's slot map has it, and numReplicas counts
// that master's replicas. A master that no longer owns the slot answers
// MOVED (or ASK, during a slot migration): the write did not run, the
// call fails, the slot map is reloaded and the next call goes to the new
// owner; the write is not resent. So while a slot migrates, acknowledged
// writes of its keys that have already moved fail (go-redis would follow
// the ASK for them without this option).
//
// What a failover does. Redis replication is asynchronous: a master
// answers a write before its replicas have it. Without this option a lock
// granted by a master that fails before its replica received the key is
// gone after the replica's promotion, and another client can take it
// while the first still holds it (TestSentinelFailoverWithoutReplicaAck,
// TestClusterFailoverLosesUnreplicatedKey). With it, the node grants a
// lock only once numReplicas replicas have the key, and a failover to one
// of them keeps it, its TTL counting on, so the next client is refused
// while the lock is valid (TestSentinelFailoverWithReplicaAck,
// TestClusterFailoverWithReplicaAckKeepsTheLock); a grant that the
// replicas did not acknowledge was never a grant, so losing it in a
// failover hands nobody's lock to another client
// (TestClusterFailoverWithReplicaAckUnreplicated).
//
// WAIT does not make Redis strongly consistent, and these remain
// possible:
//
//   - The master applies the write before the replicas acknowledge it and
//     does not undo it when they do not: the lockers roll it back, but a
//     failover between the write and the rollback can leave the key on
//     the new master, held by nobody, blocking the lock until its TTL.
//   - A replica that did not acknowledge can be promoted when the master
//     has more replicas than numReplicas: Sentinel and Redis Cluster
//     prefer the replica that replicated most, but do not promise it, and
//     an operator's CLUSTER FAILOVER TAKEOVER skips the election. Then
//     the lock is lost as without this option: ask for as many
//     acknowledgements as there are replicas that can be promoted.
//   - A replica that acknowledged can fail too, or restart without the
//     key: an acknowledgement means the replica received and applied the
//     write in memory, not that it wrote it to disk.
//   - The promoted replica expires the key by its own clock (Redis 7
//     replicates expiries as absolute times): its clock must agree with
//     the old master's within the lockers' drift allowance.
//   - After a failover the new master has fewer replicas, often none,
//     until one joins it: until then every acknowledged write of its keys
//     fails, so the node refuses new locks and extensions of held ones
//     (a Redlock's other nodes may still carry them).
//
// timeout must be at least a millisecond (WAIT 0 would wait forever) and
// should fit well inside the lockers' per-node timeout
// (redlock.WithNodeTimeout), which bounds the whole call anyway: a WAIT
// cut short by it is an error too. Each acked write is sent with its WAIT
// as a pipeline of its own, not batched with concurrent callers'
// commands. A write refused (the key held by another) waits too, not
// longer than until the replicas have this connection's earlier writes.
// Releases are not acknowledged: a release lost in a failover leaves the
// key until its TTL, which delays the next holder and endangers nobody.
//
// New refuses it for a ring client (whose keys are spread over masters
// with no shared replicas), and numReplicas < 1 or a timeout under a
// millisecond, with redlock.ErrInvalid.
func WithReplicaAck(numReplicas int, timeout time.Duration) Option {
	return func(o *options) { o.ackSet, o.ackN, o.ackTimeout = true, numReplicas, timeout }
}

// ErrReplicaAck is the error (wrapped) of a write that the node made but
// too few of its replicas acknowledged in time (WithReplicaAck).
var ErrReplicaAck = errors.New("goredis: too few replicas acknowledged the write")

// failoverAddr is the address go-redis gives a failover client.
const failoverAddr = "FailoverClient"

// name names the node (see New and WithFailover).
func (o *options) name(c redis.UniversalClient) (string, error) {
	rc, isClient := c.(*redis.Client)
	isFailover := isClient && rc.Options().Addr == failoverAddr
	switch {
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
}

func (o *options) replicaAck(c redis.UniversalClient, name string) (*replicaAck, error) {
	if !o.ackSet {
		return nil, nil
	}
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return nil, fmt.Errorf("%w: goredis.New: node %q: WithReplicaAck needs a *redis.Client (a master, or a failover client) or a *redis.ClusterClient, not %T",
			redlock.ErrInvalid, name, c)
	}
	if o.ackN < 1 || o.ackTimeout < time.Millisecond {
		return nil, fmt.Errorf("%w: goredis.New: node %q: WithReplicaAck(%d, %v): want at least one replica and a timeout of at least 1ms",
			redlock.ErrInvalid, name, o.ackN, o.ackTimeout)
	}
	return &replicaAck{n: o.ackN, timeout: o.ackTimeout}, nil
}

// send runs cmd on the node, never resent. When acked is set and the node
// has WithReplicaAck, cmd and a WAIT go out as one pipeline on one
// connection to the server that owns key (see ackPipeline), and the WAIT
// is returned for acked; otherwise cmd goes through the coalescer and the
// WAIT is nil. The error is cmd's.
func (g *node) send(ctx context.Context, acked bool, key string, cmd redis.Cmder) (*redis.IntCmd, error) {
	if !acked || g.ack == nil {
		return nil, g.q.process(ctx, sendOnce{cmd})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pipe, err := g.ackPipeline(ctx, key)
	if err != nil {
		return nil, err // nothing sent
	}
	wait := redis.NewIntCmd(ctx, "wait", g.ack.n, g.ack.timeout.Milliseconds())
	_ = pipe.Process(ctx, sendOnce{cmd}) // a pipeline holding it is not resent
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // each command carries its own result
	return wait, cmd.Err()
}

// ackPipeline returns a pipeline for a write and its WAIT: WAIT counts
// the replicas that have its connection's writes, so both must go out on
// one connection to the server that runs the write. That is the node's
// own client, unless it is a cluster client, whose pipelines spread
// commands over the masters by key and would send WAIT, which has none,
// to any of them: then it is the client of the master that owns key's
// slot in the cluster client's slot map, whose pipelines hold one
// connection. That master answers MOVED (or ASK) if the map is out of
// date: the write did not run there, the call fails, and the cluster node
// has the map reloaded (clusterNode.failed); nothing is resent to the
// new owner, and the lockers count the vote as failed.
func (g *node) ackPipeline(ctx context.Context, key string) (redis.Pipeliner, error) {
	cc, ok := g.c.(*redis.ClusterClient)
	if !ok {
		return g.c.Pipeline(), nil
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("goredis: node %s: the master of key %q: %w", g.name, key, err)
	}
	return master.Pipeline(), nil
}

// acked checks the WAIT that followed a successful write: nil without
// WithReplicaAck, an error matching ErrReplicaAck when too few replicas
// acknowledged, or when WAIT itself failed (then matching its error too).
func (g *node) acked(wait *redis.IntCmd) error {
	if wait == nil {
		return nil
	}
	n, err := wait.Result()
	if err != nil {
		return fmt.Errorf("%w: node %s: WAIT %d %d: %w", ErrReplicaAck, g.name, g.ack.n, g.ack.timeout.Milliseconds(), err)
	}
	if n < int64(g.ack.n) {
		return fmt.Errorf("%w: node %s: %d of %d replicas within %v", ErrReplicaAck, g.name, n, g.ack.n, g.ack.timeout)
	}
	return nil
}
