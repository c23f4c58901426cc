package rueidisnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/redis/rueidis"
)

// clusterNode is the Backend of a rueidis client in cluster mode: a whole
// Redis Cluster is one node of a lock (a Redlock may count it among
// standalone masters). Every name a lock uses on it (the lock key, its
// fence counter and its release channel) is in one hash slot, mapped by
// package internal/hashslot as package goredis maps it, so every script
// runs on the one master that owns the key, and processes using either
// adapter share the cluster's locks. Releases are announced with
// SPUBLISH, which reaches the subscribers of the slot's shard only.
//
// Waiters subscribe with SSUBSCRIBE through one hub per hash slot, each
// with a dedicated connection of its own to the slot's master, open only
// while someone waits for a key of that slot: rueidis binds a dedicated
// cluster connection to the slot of its first command and refuses (by
// panicking) a command of another slot on it.
type clusterNode struct {
	node // c and name; its hub is unused

	mu   sync.Mutex
	hubs map[uint16]*hub // by slot; created on first use, at most 16384
}

func newClusterNode(c rueidis.Client, name string) *clusterNode {
	return &clusterNode{node: node{c: c, name: name}, hubs: map[uint16]*hub{}}
}

// clusterKey maps a lock key to the key the cluster node uses
// (hashslot.Key). Refusals match redlock.ErrInvalid.
func clusterKey(key string) (string, error) {
	k, err := hashslot.Key(key)
	if err != nil {
		return "", fmt.Errorf("rueidisnode: %w", err)
	}
	return k, nil
}

// CheckKey refuses the keys whose lock, fence counter and release channel
// cannot share a hash slot (see clusterKey), so a Redlock refuses them at
// once rather than counting this node as failed in every round.
func (g *clusterNode) CheckKey(key string) error {
	_, err := clusterKey(key)
	return err
}

func (g *clusterNode) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.node.Acquire(ctx, k, token, ttl)
}

func (g *clusterNode) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.release(ctx, k, token, announce, "2") // SPUBLISH
}

func (g *clusterNode) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.node.Extend(ctx, k, token, ttl)
}

func (g *clusterNode) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	return g.node.AcquireFenced(ctx, k, token, ttl)
}

func (g *clusterNode) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.node.RaiseFence(ctx, k, token, fence)
}

func (g *clusterNode) Notify(ctx context.Context, key string, released func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, err := clusterKey(key)
	if err != nil {
		return nil, err
	}
	return g.slotHub(hashslot.Of(k)).notify(ctx, released, redlock.ReleaseChannel(k))
}

// slotHub returns the hub of a slot.
func (g *clusterNode) slotHub(s uint16) *hub {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hubs[s]
	if h == nil {
		h = &hub{c: g.c, sharded: true}
		g.hubs[s] = h
	}
	return h
}
