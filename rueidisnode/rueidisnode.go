// Package rueidisnode adapts a github.com/redis/rueidis client to a
// redlock.Backend: the lock commands, the Lua scripts (redlock.Lua) run by
// EVALSHA, fencing (redlock.Fencer) and release announcements for
// hand-off (redlock.Notifier).
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//	...
//	node, err := rueidisnode.New(c)
//	...
//	locker, err := redlock.NewSingle(node)
//
// The package is called rueidisnode, not rueidis, so that it does not
// shadow the client library's own package name in the files that import
// both. It lives in a module of its own (rueidisnode/go.mod), so the
// redlock module does not depend on rueidis. The adapter passes the
// conformance suite in package backendtest on real redis-server, and
// interoperates with package goredis: both keep a lock key's fence counter
// at key + ":fence" and announce releases on redlock.ReleaseChannel(key),
// so processes using either adapter can share the same servers and locks.
//
// # Commands are never resent
//
// rueidis retries a command after a broken connection only when the command
// is marked retryable: read-only commands, and commands a caller marked
// with ToRetryable. Every command this adapter sends (SET NX PX, EVALSHA,
// EVAL) is a write that is not marked, so whatever the client's
// DisableRetry, a lost reply is reported as an error, never answered by a
// second execution. A script unknown to the node (after a restart or
// SCRIPT FLUSH) answers NOSCRIPT, which means nothing ran: rueidis's Lua
// then sends EVAL once, which is no resend. The tests lose a reply after
// its command ran, with rueidis's retries left on, and count on the
// server (INFO commandstats) that every command ran exactly once
// (TestLostRepliesAreErrors, TestNoscriptFallbackIsNoResend,
// TestLockerOverLostReplies).
//
// One client option breaks this, and New cannot see it: with
// ClientOption.ConnLifetime set, rueidis closes a connection when its
// lifetime ends and sends again, on a new connection, any command whose
// reply had not arrived within a second (a node that is slow or paused at
// that moment), whether or not the command is retryable. Leave
// ConnLifetime at zero (its default) for a client given to New.
//
// # Deadlines and cancellation
//
// rueidis bounds every call by its context: a call on a connection that
// other calls are using waits for its reply or for its context, whichever
// comes first; a call alone on an idle connection is written and read
// with the context's deadline set on the connection, so it is bounded by
// its deadline (the lockers always give node calls one, the per-node
// timeout) but, while reading the reply, not by a cancellation before it.
// A call that gives up leaves its command in flight: its outcome is
// unknown and it returns the context's error.
//
// On a Redis Cluster, rueidis also sends a command again to the node
// named by a MOVED or ASK reply: that reply means the first node did not
// run it, so this is no resend (TestCluster/LostReplies loses a reply on
// a cluster and counts the command once over all its servers).
//
// # Release announcements
//
// Notify subscribes over one dedicated connection per node (rueidis's
// Dedicate), open only while someone waits; see hub.go.
//
// # Redis Cluster
//
// A client in cluster mode (rueidis picks it when the InitAddress nodes
// answer CLUSTER SLOTS) is one node: the whole cluster counts once toward
// a Redlock's quorum, and may sit among standalone masters. New needs
// WithClientOption for it, and names it "cluster[addr ...]", the seed
// addresses sorted, as package goredis names a ClusterClient with the
// same seeds: the two adapters' nodes of one cluster are one node. Keys
// map as in goredis, so processes using either adapter share the locks:
//
//   - A key with a hash tag ("order:{42}") is used as it is; its fence
//     counter ("order:{42}:fence") and release channel share its slot.
//   - A key without one is wrapped in braces on the cluster: "order:42" is
//     locked as "{order:42}" (so there, "order:42" and "{order:42}" are
//     one lock; standalone nodes of the same Redlock use the key as
//     given).
//   - A key whose first "{" is followed at once by "}", a key without a
//     tag that starts with "}", and the empty key are refused with an
//     error matching redlock.ErrInvalid; the node is a redlock.KeyChecker,
//     so a locker refuses them before its first attempt.
//
// Releases are announced with SPUBLISH and waited for with SSUBSCRIBE
// (sharded pub/sub, Redis 7.0 or later), over one dedicated connection per
// hash slot waited on, to the slot's master (see cluster.go). rueidis
// reloads its slot map after MOVED and after a network error, but not
// after a call cut short by its deadline (goredis's node reloads it after
// every failure): set ClusterOption.ShardsRefreshInterval (a few seconds)
// for a cluster whose masters can fail over, so that the node finds a
// promoted replica within that interval whatever failed.
//
// # Redis Sentinel
//
// A client in sentinel mode (ClientOption.Sentinel.MasterSet, the
// sentinels in InitAddress) is one node, whichever server is its master
// at the moment; New needs WithClientOption for it, and names it
// "sentinel[master@addr ...]", the sentinels sorted, as goredis names a
// failover client's node (goredis.WithFailover). rueidis follows a
// failover when the sentinels announce it; the hub reconnects to the new
// master, and waiters are told that a release may have been missed.
// Replication is asynchronous: a lock granted by a master that fails
// before its replica received the key is lost in the failover (see
// goredis.WithReplicaAck, which this adapter has no counterpart of yet).
package rueidisnode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// New adapts a rueidis client to a redlock.Backend. A client in
// standalone mode must know one node, a master (rueidis.NewClient with one
// InitAddress), and is named after its address, "host:port" (the key of
// c.Nodes()); standalone clients with replicas are refused. (rueidis asks
// the server whether it is a cluster and picks standalone mode when it is
// not; a server that answers CLUSTER SLOTS, as miniredis does, gives a
// cluster-mode client unless ClientOption.ForceSingleClient is set.)
// Databases of one server are one node (they share its fate): they get
// the same Name, and a Redlock refuses them as duplicates.
//
// A client in cluster mode makes a whole Redis Cluster one node, and a
// client in sentinel mode (ClientOption.Sentinel.MasterSet) makes the
// master that the sentinels name one node, whichever server it is at the
// moment; both need WithClientOption, which names them (see Redis Cluster
// and Redis Sentinel in the package documentation).
//
// rueidis's defaults suit the lockers, with one exception (ConnLifetime,
// see the package documentation). Client-side caching is not used: set
// DisableCache if the server has no CLIENT TRACKING. Under many
// concurrent lock calls on few cores, rueidis's MaxFlushDelay (for
// example 100 µs) lets more commands share a write; BENCHMARKS.md has the
// figures.
//
// New returns an error matching redlock.ErrInvalid for a nil client and
// for one it refuses.
func New(c rueidis.Client, opts ...Option) (redlock.Backend, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: rueidisnode.New: nil client", redlock.ErrInvalid)
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
	if c.Mode() == rueidis.ClientModeCluster {
		return newClusterNode(c, name), nil
	}
	return &node{c: c, name: name, hub: hub{c: c}}, nil
}

// node is the Backend of one rueidis client.
type node struct {
	c    rueidis.Client
	name string
	hub  hub
}

var (
	releaseScript       = rueidis.NewLuaScript(redlock.Lua.Release)
	extendScript        = rueidis.NewLuaScript(redlock.Lua.Extend)
	acquireFencedScript = rueidis.NewLuaScript(redlock.Lua.AcquireFenced)
	raiseFenceScript    = rueidis.NewLuaScript(redlock.Lua.RaiseFence)
)

// fenceSuffix names a lock key's fence counter: key + fenceSuffix, as in
// package goredis.
const fenceSuffix = ":fence"

func (n *node) Name() string { return n.name }

func (n *node) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err // a caller that gave up sends nothing
	}
	// Always PX, even for whole seconds, so the TTL on the node is exactly
	// the one the validity was computed from.
	cmd := n.c.B().Set().Key(key).Value(token).Nx().PxMilliseconds(ttl.Milliseconds()).Build()
	err := n.c.Do(ctx, cmd).Error()
	if errors.Is(err, rueidis.Nil) {
		return false, nil // NX refused: the key exists
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

func (n *node) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	return n.release(ctx, key, token, announce, "1") // PUBLISH
}

// release runs the release script, announcing with publish ("1" PUBLISH,
// "2" SPUBLISH, see redlock.Lua) when asked to.
func (n *node) release(ctx context.Context, key, token string, announce bool, publish string) (bool, error) {
	flag := "0"
	if announce {
		flag = publish
	}
	v, err := n.run(ctx, releaseScript, []string{key}, token, flag)
	return v == 1, err
}

func (n *node) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	v, err := n.run(ctx, extendScript, []string{key}, token, strconv.FormatInt(ttl.Milliseconds(), 10))
	return v == 1, err
}

func (n *node) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	v, err := n.run(ctx, acquireFencedScript, []string{key, key + fenceSuffix}, token, strconv.FormatInt(ttl.Milliseconds(), 10))
	return v > 0, v, err
}

func (n *node) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	v, err := n.run(ctx, raiseFenceScript, []string{key, key + fenceSuffix}, token, strconv.FormatInt(fence, 10))
	return v == 1, err
}

// run executes s on the node and returns its integer reply. rueidis's Lua
// sends EVALSHA, and EVAL only when the node answered NOSCRIPT (nothing
// ran); neither is marked retryable, so neither is resent.
func (n *node) run(ctx context.Context, s *rueidis.Lua, keys []string, args ...string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err // a caller that gave up sends nothing
	}
	return s.Exec(ctx, n.c, keys, args).AsInt64()
}

func (n *node) Notify(ctx context.Context, key string, released func(payload string)) (func(), error) {
	return n.hub.notify(ctx, released, redlock.ReleaseChannel(key))
}
