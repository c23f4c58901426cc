package goredis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/redis/go-redis/v9"
)

// clusterNode is the Backend of a go-redis ClusterClient: a whole Redis
// Cluster is one node of a lock (a Redlock may count it among standalone
// masters). Every name a lock uses on it (the lock key, its fence counter
// and its release channel) is in one hash slot, so every script runs on
// the one master that owns the key (see clusterKey), and releases are
// announced with SPUBLISH, which reaches the subscribers of that slot's
// shard only, instead of PUBLISH, which a cluster sends to every node.
//
// Waiters subscribe with SSUBSCRIBE through one hub per hash slot, each
// with a pub/sub connection of its own to the slot's master, open only
// while someone waits for a key of that slot. Not one per master: go-redis
// resubscribes a connection's channels after a drop in one SSUBSCRIBE,
// which the cluster refuses (CROSSSLOT) unless they share a slot.
type clusterNode struct {
	node // c, name and q; its hub is unused

	mu   sync.Mutex
	hubs map[uint16]*hub // by slot; created on first use, at most 16384
}

func newClusterNode(c *redis.ClusterClient, name string, ack *replicaAck) *clusterNode {
	return &clusterNode{node: node{c: c, name: name, q: coalescer{c: c}, ack: ack}, hubs: map[uint16]*hub{}}
}

func (g *clusterNode) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.Acquire(ctx, k, token, ttl)
	return ok, g.failed(err)
}

func (g *clusterNode) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	flag := "0"
	if announce {
		flag = "2" // SPUBLISH
	}
	n, err := g.run(ctx, releaseScript, 1, k, token, flag)
	return n == 1, g.failed(err)
}

func (g *clusterNode) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.Extend(ctx, k, token, ttl)
	return ok, g.failed(err)
}

func (g *clusterNode) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	ok, fence, err := g.node.AcquireFenced(ctx, k, token, ttl)
	return ok, fence, g.failed(err)
}

func (g *clusterNode) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.RaiseFence(ctx, k, token, fence)
	return ok, g.failed(err)
}

func (g *clusterNode) Notify(ctx context.Context, key string, released func(payload string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, err := clusterKey(key)
	if err != nil {
		return nil, err
	}
	return g.slotHub(slot(k)).notify(ctx, g.c, released, redlock.ReleaseChannel(k))
}

// failed returns err, and when a command failed (its master unreachable
// or dead, CLUSTERDOWN, a timeout) has the client reload the cluster's
// slot map in the background. go-redis reloads it by itself after MOVED,
// but not after a network error of a command marked no-retry, as every
// command of this adapter is: without this a node would keep sending to a
// dead master until ClusterStateReloadInterval (60 s by default) passed,
// long after its replica had been promoted.
func (g *clusterNode) failed(err error) error {
	if err != nil {
		g.c.(*redis.ClusterClient).ReloadState(context.Background())
	}
	return err
}

// slotHub returns the hub of a slot.
// CheckKey refuses the keys whose lock, fence counter and release channel
// cannot share a hash slot (see clusterKey), so a Redlock refuses them at
// once rather than counting this node as failed in every round.
func (g *clusterNode) CheckKey(key string) error {
	_, err := clusterKey(key)
	return err
}

func (g *clusterNode) slotHub(s uint16) *hub {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.hubs[s]
	if h == nil {
		h = &hub{sharded: true}
		g.hubs[s] = h
	}
	return h
}

// clusterKey maps a lock key to the key the cluster node uses, so that
// the key, its fence counter (+ fenceSuffix) and its release channel
// (redlock.ReleaseChannel) hash to one slot, by the rules of package
// internal/hashslot (shared with the rueidis adapter, so that both map a
// key alike). Refusals match redlock.ErrInvalid.
func clusterKey(key string) (string, error) {
	k, err := hashslot.Key(key)
	if err != nil {
		return "", fmt.Errorf("goredis: %w", err)
	}
	return k, nil
}

// slot returns the hash slot of key (hashslot.Of).
func slot(key string) uint16 { return hashslot.Of(key) }
