package goredis

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/hashslot"
)

// The redlock.MultiLocker capability: a set of keys, all or nothing, in
// one script per call (redlock.Lua's *Many scripts). On a Redis Cluster
// every key of a set, its fence counter and its release channel must
// share one hash slot, so the keys must share a hash tag
// ("{acct}:1", "{acct}:2"); other sets are refused (CheckKeys).

func (g *node) AcquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	n, wait, err := g.exec(ctx, true, acquireManyScript, len(keys), manyArgs(keys, false, token, ttl.Milliseconds())...)
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err // made, maybe lost in a failover: may have happened
	}
	return true, nil
}

func (g *node) AcquireManyFenced(ctx context.Context, keys []string, token string, ttl time.Duration, fences []int64) (bool, error) {
	cmd, wait, err := g.eval(ctx, true, acquireManyFencedScript, 2*len(keys), manyArgs(keys, true, token, ttl.Milliseconds())...)
	if err != nil {
		return false, err
	}
	got, err := cmd.Int64Slice()
	if err != nil || len(got) == 0 {
		return false, err
	}
	if len(got) != len(fences) {
		return false, fmt.Errorf("goredis: node %s: %d fences for %d keys", g.name, len(got), len(fences))
	}
	copy(fences, got)
	if err := g.acked(wait); err != nil {
		return false, err
	}
	return true, nil
}

func (g *node) RaiseFences(ctx context.Context, keys []string, token string, fences []int64) (bool, error) {
	args := manyArgs(keys, true, token)
	for _, f := range fences {
		args = append(args, f)
	}
	n, wait, err := g.exec(ctx, true, raiseFencesScript, 2*len(keys), args...)
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err
	}
	return true, nil
}

func (g *node) ReleaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error) {
	flag := "0"
	if announce {
		flag = "1"
	}
	return g.releaseMany(ctx, keys, token, flag)
}

func (g *node) releaseMany(ctx context.Context, keys []string, token, flag string) (bool, error) {
	n, err := g.run(ctx, releaseManyScript, len(keys), manyArgs(keys, false, token, flag)...)
	return err == nil && n == int64(len(keys)), err
}

func (g *node) ExtendMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	n, wait, err := g.exec(ctx, true, extendManyScript, len(keys), manyArgs(keys, false, token, ttl.Milliseconds())...)
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err
	}
	return true, nil
}

// manyArgs lays out a set's script arguments: the keys, their fence
// counters when fenced, then args.
func manyArgs(keys []string, fenced bool, args ...any) []any {
	out := make([]any, 0, 2*len(keys)+len(args)+len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	if fenced {
		for _, k := range keys {
			out = append(out, k+fenceSuffix)
		}
	}
	return append(out, args...)
}

// clusterKeys maps a set's keys as clusterKey does, and refuses a set
// whose keys are not all in one hash slot (hashslot.Keys).
func clusterKeys(keys []string) ([]string, error) {
	ks, err := hashslot.Keys(keys)
	if err != nil {
		return nil, fmt.Errorf("goredis: %w", err)
	}
	return ks, nil
}

// CheckKeys refuses a set whose keys do not share a hash slot (see
// clusterKeys), so LockMany fails at once rather than in every round.
func (g *clusterNode) CheckKeys(keys []string) error {
	_, err := clusterKeys(keys)
	return err
}

func (g *clusterNode) AcquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	ok, err := g.node.AcquireMany(ctx, ks, token, ttl)
	return ok, g.failed(err)
}

func (g *clusterNode) AcquireManyFenced(ctx context.Context, keys []string, token string, ttl time.Duration, fences []int64) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	ok, err := g.node.AcquireManyFenced(ctx, ks, token, ttl, fences)
	return ok, g.failed(err)
}

func (g *clusterNode) RaiseFences(ctx context.Context, keys []string, token string, fences []int64) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	ok, err := g.node.RaiseFences(ctx, ks, token, fences)
	return ok, g.failed(err)
}

func (g *clusterNode) ReleaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	flag := "0"
	if announce {
		flag = "2" // SPUBLISH
	}
	ok, err := g.releaseMany(ctx, ks, token, flag)
	return ok, g.failed(err)
}

func (g *clusterNode) ExtendMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	ks, err := clusterKeys(keys)
	if err != nil {
		return false, err
	}
	ok, err := g.node.ExtendMany(ctx, ks, token, ttl)
	return ok, g.failed(err)
}

var (
	_ redlock.MultiLocker   = (*node)(nil)
	_ redlock.MultiLocker   = (*clusterNode)(nil)
	_ redlock.KeySetChecker = (*clusterNode)(nil)
)
