// Package goredis adapts a go-redis v9 client to a redlock.Backend: the
// lock commands, the Lua scripts (redlock.Lua) run by EVALSHA, fencing
// (redlock.Fencer) and release announcements for hand-off
// (redlock.Notifier).
//
//	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	node, err := goredis.New(c)
//	...
//	locker, err := redlock.NewSingle(node)
//
// The adapter passes the conformance suite in package backendtest, over
// a standalone redis-server and over a Redis Cluster.
//
// # Redis Cluster
//
// A *redis.ClusterClient is one node: the whole cluster counts once toward
// a Redlock's quorum, and may sit among standalone masters
// (redlock.New([]redlock.Backend{cluster, master1, master2})). A lock
// uses three names on the cluster, its key, its fence counter (key +
// ":fence") and its release channel (redlock.ReleaseChannel), and the
// scripts need all three in one hash slot, so the adapter maps the key:
//
//   - A key with a hash tag is used as it is (Redis's rule: the tag is the
//     text between the key's first "{" and the first "}" after it, when
//     not empty): "order:{42}" is locked as "order:{42}", fenced in
//     "order:{42}:fence", announced on "redlock:released:order:{42}".
//   - A key without one is wrapped in braces on the cluster: "order:42" is
//     locked as "{order:42}", fenced in "{order:42}:fence", announced on
//     "redlock:released:{order:42}". So on a cluster node "order:42" and
//     "{order:42}" are one lock; standalone nodes of the same Redlock use
//     the key as given.
//   - The queue of WithFairness (redlock.QueueKeys: key + ":queue",
//     key + ":queue:exp" and key + ":queue:grant") extends the mapped
//     key, so it shares its slot.
//   - Refused by every call with an error matching redlock.ErrInvalid: a
//     key whose first "{" is followed at once by "}" ("order:{}", an empty
//     tag, with which Redis hashes the whole key), and a key without a tag
//     that starts with "}" (its tag, wrapped, would be empty).
//
// Releases are announced with SPUBLISH and waited for with SSUBSCRIBE
// (sharded pub/sub, Redis 7.0 or later): a release reaches the shard that
// owns the key, not every node of the cluster as a PUBLISH would. Waiters
// share one pub/sub connection per hash slot they wait on, to the slot's
// master, open only while someone waits, and Notify returns once the
// SSUBSCRIBE is active there, as on a standalone node. On a cluster older
// than 7.0 locks work but Notify fails: waiters wake at their backoff.
//
// Redis Cluster replicates asynchronously: a master that dies before its
// replica has a lock's key takes the lock with it, and the promoted
// replica grants it again (TestClusterFailoverLosesUnreplicatedKey).
// WithReplicaAck works on a cluster node as on a single master: each
// granting write and its WAIT go to the master of the key's slot on one
// connection, and a failover to a replica that acknowledged keeps the
// lock.
//
// The node's Name is "cluster[addr ...]", the client's seed addresses
// sorted: give every client of one cluster the same seed addresses (in
// any order) so that a Redlock refuses two of them as one node counted
// twice, and never list a member of the cluster as a standalone node too.
//
// # Redis Sentinel
//
// A failover client (redis.NewFailoverClient: a master found through
// Redis Sentinel) is one node, named after its master name and sentinels
// rather than the current master's address, which a failover changes:
//
//	fo := &redis.FailoverOptions{MasterName: "mymaster",
//		SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"},
//		ContextTimeoutEnabled: true}
//	node, err := goredis.New(redis.NewFailoverClient(fo), goredis.WithFailover(fo),
//		goredis.WithReplicaAck(1, 100*time.Millisecond))
//
// Redis replicates asynchronously. Without WithReplicaAck a master grants
// a lock before its replica has the key; if the master dies before the
// key reached the replica, the promoted replica does not have it and
// grants the same lock to the next client while the first still holds it
// (TestSentinelFailoverWithoutReplicaAck shows it). WithReplicaAck counts
// a grant or an extension only once replicas acknowledged it, so a
// failover to a replica that acknowledged keeps the lock (see its
// documentation for what it does not cover).
package goredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/go-redis/v9"
)

// New adapts a go-redis v9 client to a redlock.Backend named after its
// address, "host:port". The client is usually a *redis.Client for one
// master, or a failover client of a master behind Redis Sentinel, which
// needs WithFailover (see Redis Sentinel above); WithReplicaAck makes the
// node wait for its replicas. A *redis.ClusterClient makes a whole Redis Cluster one node (see
// Redis Cluster above). A ring client works when every key a lock uses
// (the lock key and its fence counter, key + ":fence") maps to one
// master, so give keys a hash tag ("{order:1}"). Databases of one server
// are one node (they share the server's fate): they get the same Name,
// and a Redlock refuses them as duplicates.
//
// New returns an error matching redlock.ErrInvalid for a nil client, and
// for a client created without ContextTimeoutEnabled: true, with which
// go-redis ignores context deadlines, so a paused node would hold every
// call for the client's ReadTimeout instead of the lockers' per-node
// timeout, and for a WithReplyPoll out of its range.
//
// Commands are never resent: whatever the client's MaxRetries, every
// command the adapter sends is marked NoRetry (sendOnce), so a lost reply
// is an error, never a second execution's answer. Scripts run with
// EVALSHA and fall back to EVAL the first time a node does not know them
// (after a restart or SCRIPT FLUSH). Commands that concurrent callers send
// to one node go out together as one pipeline (pipeline.go); a caller
// alone sends at once. Release announcements reach waiters over one shared
// pub/sub connection per node, read only while someone waits (hub.go);
// a node with a connection of its own (below) keeps it open, subscribed
// to nothing, between waits.
//
// # The node's own connection
//
// For a plain *redis.Client (one master: not a cluster, failover or ring
// client, and without WithReplicaAck), the lock commands themselves
// (Acquire, Release, Extend, AcquireFenced, RaiseFence) do not go through
// the client's pool: the node opens one connection of its own, with the
// client's Dialer (so TLSConfig, Network "unix" and a custom Dialer
// apply), Addr, and greeting (AUTH with Username and Password, or from
// CredentialsProvider or CredentialsProviderContext at each dial; SELECT
// DB; CLIENT SETNAME ClientName), speaks RESP2 on it with commands
// encoded by hand, and batches concurrent callers on it as above. A
// command then costs no allocation, and the node is a redlock.Starter:
// a Redlock's rounds over such nodes send to every node from the calling
// goroutine and then read each reply, with no goroutine per node
// (BENCHMARKS.md, "Our own connection"). The rules above hold on it as
// on the pool: nothing is resent, every call is bounded by its context's
// deadline, and a connection that timed out or read anything unexpected
// is closed, never read again; the next call dials anew. A call that is
// the process's only one waiting for a node looks for its reply for up
// to 50 µs before it parks, which spares it the wake-up of an idle core
// (WithReplyPoll). Its other commands (LockMany, read-write locks, Peek,
// pub/sub) still use the client.
//
// What the node's connection does not honour, it leaves to the client: a
// client with an OnConnect hook, a StreamingCredentialsProvider or a
// Limiter keeps every command on the pool. The client's hooks (AddHook:
// tracing, metrics) do not see the commands on the node's connection,
// nor do its pool statistics, retries or timeouts other than the
// context's (a call without a deadline is bounded by ReadTimeout): use
// WithClientPool for lock commands your hooks should see. The connection
// stays open, holding no goroutine while idle, for as long as the node
// lives: closing the go-redis client does not close it, the node's
// Close does (New's node of a *redis.Client is an io.Closer; type-assert
// it when nodes come and go during the process's life).
//
// Such a node also keeps its pub/sub subscription up for 250 ms after
// the last waiter leaves, still subscribed to that waiter's channels (at
// most four), its two goroutines reading and dropping what is published
// there: a process that waits on the same key again meanwhile (a worker
// that hands a lock on and asks for it again) is subscribed at once,
// with nothing written (BENCHMARKS.md, "A subscription that lingers").
// Then it unsubscribes every channel and parks the connection, unread
// and with no goroutine, for the next waiter, whom it saves a dial and a
// greeting (with several processes taking turns on a key, each Lock call
// that waits would otherwise dial every node; BENCHMARKS.md, "Waiters far
// back wait for their grant; the pub/sub connection is kept"). Close ends
// a lingering subscription and closes the connection; a parked
// connection the server closed meanwhile is dialled again by go-redis
// for the next waiter.
//
// The node's own connection carries the fair scripts too (AcquireFair,
// ReleaseFair, LeaveQueue), and the node is a redlock.FairStarter, so
// that a fair Lock call's rounds need no goroutine per node either.
func New(c redis.UniversalClient, opts ...Option) (redlock.Backend, error) {
	if isNil(c) {
		return nil, fmt.Errorf("%w: goredis.New: nil client", redlock.ErrInvalid)
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	name, err := o.name(c)
	if err != nil {
		return nil, err
	}
	if !contextTimeouts(c) {
		return nil, fmt.Errorf("%w: goredis.New: node %q: the go-redis client needs ContextTimeoutEnabled: true so the per-node timeout bounds each call",
			redlock.ErrInvalid, name)
	}
	ack, err := o.replicaAck(c, name)
	if err != nil {
		return nil, err
	}
	if d := o.pollFor(); d < 0 || d > maxReplyPoll {
		return nil, fmt.Errorf("%w: goredis.New: node %q: WithReplyPoll(%v): want 0 (never) to %v",
			redlock.ErrInvalid, name, d, maxReplyPoll)
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return newClusterNode(cc, name, ack), nil
	}
	n := &node{c: c, name: name, q: coalescer{c: c}, ack: ack}
	if n.w = newWire(c, &o, name); n.w != nil {
		n.hub.keep = true // closed by Close, as the wire
		n.hub.core.Linger = subscriptionLinger
		return &wireNode{n}, nil
	}
	return n, nil
}

// wireNode is the node of a plain *redis.Client with its own connection
// (wire.go): a redlock.Starter, so that a Redlock's rounds over such
// nodes run without a goroutine per node.
type wireNode struct{ *node }

func (g *wireNode) StartAcquire(ctx context.Context, key, token string, ttl time.Duration) redlock.Pending {
	return g.w.start(ctx, command{op: opSet, key: key, token: token, n: ttl.Milliseconds()})
}

func (g *wireNode) StartRelease(ctx context.Context, key, token string, announce bool) redlock.Pending {
	return g.w.start(ctx, releaseCommand(key, token, announce))
}

func (g *wireNode) StartExtend(ctx context.Context, key, token string, ttl time.Duration) redlock.Pending {
	return g.w.start(ctx, command{op: opScript, s: &extendScript, key: key, token: token, n: ttl.Milliseconds()})
}

func releaseCommand(key, token string, announce bool) command {
	flag := "0"
	if announce {
		flag = "1"
	}
	return command{op: opScript, s: &releaseScript, key: key, token: token, flag: flag}
}

// Close closes the connection the node opened itself (see New), at once
// if idle or else as soon as the command in flight has its reply; calls
// of the node's lock commands after it fail with an error matching
// net.ErrClosed. It does not close the go-redis client, which belongs to
// the caller, and is not needed for a node that lives as long as the
// process. A node without a connection of its own (WithClientPool, a
// cluster, a failover client, WithReplicaAck) has nothing to close.
func (g *node) Close() error {
	if g.w == nil {
		return nil
	}
	return errors.Join(g.w.close(), g.hub.close())
}

// node is the Backend of one go-redis client.
type node struct {
	c    redis.UniversalClient
	name string
	q    coalescer
	hub  hub
	ack  *replicaAck // WithReplicaAck; nil without
	w    *wire       // the node's own connection for the hot commands; nil for none
}

// isNil reports whether c is nil, or a nil pointer of a go-redis client
// type (which would panic on its first use).
func isNil(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// clientName names a node after its address.
func clientName(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		// Sorted: two clients of one cluster seeded in another order are
		// one node, and a Redlock refuses them as duplicates.
		addrs := slices.Compact(slices.Sorted(slices.Values(c.Options().Addrs)))
		return fmt.Sprintf("cluster%v", addrs)
	case *redis.Ring:
		return fmt.Sprintf("ring%v", c.Options().Addrs)
	}
	return fmt.Sprintf("%T", c)
}

// contextTimeouts reports whether the client honours context deadlines.
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true // unknown implementations are trusted, as documented on Backend
}

func (g *node) Name() string { return g.name }

func (g *node) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if g.w != nil {
		kind, n, err := g.w.do(ctx, command{op: opSet, key: key, token: token, n: ttl.Milliseconds()})
		return replyBool(opSet, kind, n, err)
	}
	// Always PX, even for whole seconds, so the TTL on the node is exactly
	// the one the validity was computed from.
	cmd := redis.NewBoolCmd(ctx, "set", key, token, "px", ttl.Milliseconds(), "nx")
	wait, err := g.send(ctx, true, key, cmd)
	if err != nil {
		return false, err // cmd may still be in flight: read nothing from it
	}
	if !cmd.Val() {
		return false, nil
	}
	if err := g.acked(wait); err != nil {
		return false, err // made, maybe lost in a failover: may have happened
	}
	return true, nil
}

func (g *node) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	if g.w != nil {
		kind, n, err := g.w.do(ctx, releaseCommand(key, token, announce))
		return replyBool(opScript, kind, n, err)
	}
	flag := "0"
	if announce {
		flag = "1"
	}
	n, err := g.run(ctx, releaseScript, 1, key, token, flag)
	return n == 1, err
}

func (g *node) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if g.w != nil {
		kind, n, err := g.w.do(ctx, command{op: opScript, s: &extendScript, key: key, token: token, n: ttl.Milliseconds()})
		return replyBool(opScript, kind, n, err)
	}
	n, wait, err := g.exec(ctx, true, extendScript, 1, key, token, ttl.Milliseconds())
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err // made, maybe lost in a failover: may have happened
	}
	return true, nil
}

// sendOnce wraps a command that go-redis must not resend after it may
// have reached the node: go-redis retries a command whose connection broke
// (MaxRetries, 3 by default), and the retry's answer would describe the
// first execution's effect (see Backend). A pipeline holding one is not
// resent either. The wrapped command keeps its result.
type sendOnce struct{ redis.Cmder }

func (sendOnce) NoRetry() bool { return true }

// fenceSuffix names a lock key's fence counter: key + fenceSuffix.
const fenceSuffix = ":fence"

func (g *node) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	if g.w != nil {
		n, err := scriptInt(g.w.do(ctx, command{op: opScript, s: &acquireFencedScript, fenced: true, key: key, token: token, n: ttl.Milliseconds()}))
		if err != nil || n <= 0 {
			return false, n, err
		}
		return true, n, nil
	}
	n, wait, err := g.exec(ctx, true, acquireFencedScript, 2, key, key+fenceSuffix, token, ttl.Milliseconds())
	if err != nil || n <= 0 {
		return false, n, err
	}
	if err := g.acked(wait); err != nil {
		return false, 0, err
	}
	return true, n, nil
}

func (g *node) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	if g.w != nil {
		kind, n, err := g.w.do(ctx, command{op: opScript, s: &raiseFenceScript, fenced: true, key: key, token: token, n: fence})
		return replyBool(opScript, kind, n, err)
	}
	n, wait, err := g.exec(ctx, true, raiseFenceScript, 2, key, key+fenceSuffix, token, fence)
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err // made, maybe lost in a failover: may have happened
	}
	return true, nil
}

func (g *node) Notify(ctx context.Context, key string, released func(payload string)) (func(), error) {
	return g.hub.notify(ctx, g.c, released, redlock.ReleaseChannel(key))
}
