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
// # Release announcements
//
// Notify subscribes over one dedicated connection per node (rueidis's
// Dedicate), open only while someone waits; see hub.go.
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

// New adapts a rueidis client to a redlock.Backend named after the node's
// address, "host:port" (the key of c.Nodes()). The client must be in
// standalone mode and know one node: a client for one master, made by
// rueidis.NewClient with one InitAddress. (rueidis asks the server whether
// it is a cluster and picks standalone mode when it is not; a server that
// answers CLUSTER SLOTS, as miniredis does, gives a cluster-mode client
// unless ClientOption.ForceSingleClient is set.) Cluster and Sentinel
// clients, and standalone clients with replicas, are refused for now:
// their topologies are not covered by this adapter's tests yet. Databases
// of one server are one node (they share its fate): they get the same
// Name, and a Redlock refuses them as duplicates.
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
func New(c rueidis.Client) (redlock.Backend, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: rueidisnode.New: nil client", redlock.ErrInvalid)
	}
	if m := c.Mode(); m != rueidis.ClientModeStandalone {
		return nil, fmt.Errorf("%w: rueidisnode.New: a rueidis client in %s mode; only standalone clients (one master) are supported",
			redlock.ErrInvalid, m)
	}
	nodes := c.Nodes()
	if len(nodes) != 1 {
		return nil, fmt.Errorf("%w: rueidisnode.New: the client knows %d nodes; give it one master and no replicas",
			redlock.ErrInvalid, len(nodes))
	}
	var name string
	for addr := range nodes {
		name = addr
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
	flag := "0"
	if announce {
		flag = "1"
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
	return n.hub.notify(ctx, key, released)
}
