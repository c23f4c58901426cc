package rueidisnode

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// The redlock.MultiLocker capability: a set of keys, all or nothing, one
// script per call (redlock.Lua's *Many scripts), run like the single-key
// scripts (EVALSHA, EVAL on NOSCRIPT, never resent).

var (
	acquireManyScript       = rueidis.NewLuaScript(redlock.Lua.AcquireMany)
	acquireManyFencedScript = rueidis.NewLuaScript(redlock.Lua.AcquireManyFenced)
	raiseFencesScript       = rueidis.NewLuaScript(redlock.Lua.RaiseFences)
	releaseManyScript       = rueidis.NewLuaScript(redlock.Lua.ReleaseMany)
	extendManyScript        = rueidis.NewLuaScript(redlock.Lua.ExtendMany)
)

var _ redlock.MultiLocker = (*node)(nil)

func (n *node) AcquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	v, err := n.run(ctx, acquireManyScript, keys, token, strconv.FormatInt(ttl.Milliseconds(), 10))
	return v == 1, err
}

func (n *node) AcquireManyFenced(ctx context.Context, keys []string, token string, ttl time.Duration, fences []int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err // a caller that gave up sends nothing
	}
	got, err := acquireManyFencedScript.Exec(ctx, n.c, withFences(keys), []string{token, strconv.FormatInt(ttl.Milliseconds(), 10)}).AsIntSlice()
	if err != nil || len(got) == 0 {
		return false, err
	}
	if len(got) != len(fences) {
		return false, fmt.Errorf("rueidisnode: node %s: %d fences for %d keys", n.name, len(got), len(fences))
	}
	copy(fences, got)
	return true, nil
}

func (n *node) RaiseFences(ctx context.Context, keys []string, token string, fences []int64) (bool, error) {
	args := make([]string, 0, 1+len(fences))
	args = append(args, token)
	for _, f := range fences {
		args = append(args, strconv.FormatInt(f, 10))
	}
	v, err := n.run(ctx, raiseFencesScript, withFences(keys), args...)
	return v == 1, err
}

func (n *node) ReleaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error) {
	flag := "0"
	if announce {
		flag = "1"
	}
	v, err := n.run(ctx, releaseManyScript, keys, token, flag)
	return err == nil && v == int64(len(keys)), err
}

func (n *node) ExtendMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	v, err := n.run(ctx, extendManyScript, keys, token, strconv.FormatInt(ttl.Milliseconds(), 10))
	return v == 1, err
}

// withFences returns keys followed by their fence counters.
func withFences(keys []string) []string {
	out := make([]string, 0, 2*len(keys))
	out = append(out, keys...)
	for _, k := range keys {
		out = append(out, k+fenceSuffix)
	}
	return out
}
