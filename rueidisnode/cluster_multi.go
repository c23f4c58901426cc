package rueidisnode

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/hashslot"
)

// A cluster node maps a set's keys and a peeked key as it maps a single
// lock key (hashslot), so that LockMany, Lock and Leader on the same names
// meet on the same cluster keys, as they do through goredis. Without
// these methods the node would inherit node's, which use the names
// unmapped: a set and a single-key lock of one name would then be two
// different cluster keys and would not exclude each other.

// clusterKeys maps a set's keys and refuses a set spread over several
// hash slots (hashslot.Keys).
func clusterKeys(keys []string) ([]string, error) {
	ks, err := hashslot.Keys(keys)
	if err != nil {
		return nil, fmt.Errorf("rueidisnode: %w", err)
	}
	return ks, nil
}

// CheckKeys refuses a set whose keys do not share a hash slot, so LockMany
// fails at once rather than in every round.
func (g *clusterNode) CheckKeys(keys []string) error {
	_, err := clusterKeys(keys)
	return err
}

func (g *clusterNode) AcquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	return g.node.AcquireMany(ctx, ks, token, ttl)
}

func (g *clusterNode) AcquireManyFenced(ctx context.Context, keys []string, token string, ttl time.Duration, fences []int64) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	return g.node.AcquireManyFenced(ctx, ks, token, ttl, fences)
}

func (g *clusterNode) RaiseFences(ctx context.Context, keys []string, token string, fences []int64) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	return g.node.RaiseFences(ctx, ks, token, fences)
}

// ReleaseMany announces with SPUBLISH, as Release does on a cluster.
func (g *clusterNode) ReleaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	flag := "0"
	if announce {
		flag = "2" // SPUBLISH
	}
	v, err := g.run(ctx, releaseManyScript, ks, token, flag)
	return err == nil && v == int64(len(ks)), err
}

func (g *clusterNode) ExtendMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	return g.node.ExtendMany(ctx, ks, token, ttl)
}

// Peek reads the mapped key, whose counter is in the same slot, so the
// MGET is one atomic read on one master.
func (g *clusterNode) Peek(ctx context.Context, key string) (string, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return "", 0, err
	}
	return g.node.Peek(ctx, k)
}

var (
	_ redlock.MultiLocker   = (*clusterNode)(nil)
	_ redlock.KeySetChecker = (*clusterNode)(nil)
	_ redlock.Peeker        = (*clusterNode)(nil)
)
