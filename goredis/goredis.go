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
// The adapter passes the conformance suite in package backendtest.
package goredis

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/go-redis/v9"
)

// New adapts a go-redis v9 client to a redlock.Backend named after its
// address, "host:port". The client is usually a *redis.Client for one
// master; a cluster or ring client works when every key a lock uses (the
// lock key and its fence counter, key + ":fence") maps to one master, so
// give keys a hash tag ("{order:1}"). Databases of one server are one node
// (they share the server's fate): they get the same Name, and a Redlock
// refuses them as duplicates.
//
// New returns an error matching redlock.ErrInvalid for a nil client, and
// for a client created without ContextTimeoutEnabled: true, with which
// go-redis ignores context deadlines, so a paused node would hold every
// call for the client's ReadTimeout instead of the lockers' per-node
// timeout.
//
// Commands are never resent: whatever the client's MaxRetries, every
// command the adapter sends is marked NoRetry (sendOnce), so a lost reply
// is an error, never a second execution's answer. Scripts run with
// EVALSHA and fall back to EVAL the first time a node does not know them
// (after a restart or SCRIPT FLUSH). Commands that concurrent callers send
// to one node go out together as one pipeline (pipeline.go); a caller
// alone sends at once. Release announcements reach waiters over one shared
// pub/sub connection per node, open only while someone waits (hub.go).
func New(c redis.UniversalClient) (redlock.Backend, error) {
	if isNil(c) {
		return nil, fmt.Errorf("%w: goredis.New: nil client", redlock.ErrInvalid)
	}
	name := clientName(c)
	if !contextTimeouts(c) {
		return nil, fmt.Errorf("%w: goredis.New: node %q: the go-redis client needs ContextTimeoutEnabled: true so the per-node timeout bounds each call",
			redlock.ErrInvalid, name)
	}
	return &node{c: c, name: name, q: coalescer{c: c}}, nil
}

// node is the Backend of one go-redis client.
type node struct {
	c    redis.UniversalClient
	name string
	q    coalescer
	hub  hub
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
		return fmt.Sprintf("cluster%v", c.Options().Addrs)
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
	// Always PX, even for whole seconds, so the TTL on the node is exactly
	// the one the validity was computed from.
	cmd := redis.NewBoolCmd(ctx, "set", key, token, "px", ttl.Milliseconds(), "nx")
	if err := g.q.process(ctx, sendOnce{cmd}); err != nil {
		return false, err // cmd may still be in flight: read nothing from it
	}
	return cmd.Val(), nil
}

func (g *node) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	flag := "0"
	if announce {
		flag = "1"
	}
	n, err := g.run(ctx, releaseScript, 1, key, token, flag)
	return n == 1, err
}

func (g *node) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := g.run(ctx, extendScript, 1, key, token, ttl.Milliseconds())
	return n == 1, err
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
	n, err := g.run(ctx, acquireFencedScript, 2, key, key+fenceSuffix, token, ttl.Milliseconds())
	return n > 0, n, err
}

func (g *node) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	n, err := g.run(ctx, raiseFenceScript, 2, key, key+fenceSuffix, token, fence)
	return n == 1, err
}

func (g *node) Notify(ctx context.Context, key string, released func(payload string)) (func(), error) {
	return g.hub.notify(ctx, g.c, key, released)
}
