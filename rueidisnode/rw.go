package rueidisnode

import (
	"context"
	"strconv"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// The redlock.RWLocker capability: read-write locks, one script per call
// (redlock.Lua's *Read scripts and AcquireWrite), run like the others
// (EVALSHA, EVAL on NOSCRIPT, never resent). The key names are those of
// package goredis, so the two adapters share read-write locks.

const (
	readersSuffix = ":readers"
	waitingSuffix = ":writer-waiting"
)

var (
	acquireReadScript    = rueidis.NewLuaScript(redlock.Lua.AcquireRead)
	raiseReadFenceScript = rueidis.NewLuaScript(redlock.Lua.RaiseReadFence)
	releaseReadScript    = rueidis.NewLuaScript(redlock.Lua.ReleaseRead)
	extendReadScript     = rueidis.NewLuaScript(redlock.Lua.ExtendRead)
	acquireWriteScript   = rueidis.NewLuaScript(redlock.Lua.AcquireWrite)
)

var _ redlock.RWLocker = (*node)(nil)

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func (n *node) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	v, err := n.run(ctx, acquireReadScript, []string{key, key + readersSuffix, key + waitingSuffix, key + fenceSuffix}, token, ms(ttl))
	if err != nil || v < 0 {
		return false, 0, err
	}
	return true, v, nil
}

func (n *node) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	v, err := n.run(ctx, raiseReadFenceScript, []string{key, key + readersSuffix, key + fenceSuffix}, token, strconv.FormatInt(fence, 10))
	return v == 1, err
}

func (n *node) ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	return n.releaseRead(ctx, key, token, announce, "1") // PUBLISH
}

// releaseRead runs the reader's release script, announcing with publish
// ("1" PUBLISH, "2" SPUBLISH) when asked to.
func (n *node) releaseRead(ctx context.Context, key, token string, announce bool, publish string) (bool, error) {
	flag := "0"
	if announce {
		flag = publish
	}
	v, err := n.run(ctx, releaseReadScript, []string{key, key + readersSuffix}, token, flag)
	return err == nil && v == 1, err
}

func (n *node) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	v, err := n.run(ctx, extendReadScript, []string{key, key + readersSuffix}, token, ms(ttl))
	return v == 1, err
}

func (n *node) AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (bool, int64, error) {
	flag := "0"
	if fenced {
		flag = "1"
	}
	v, err := n.run(ctx, acquireWriteScript, []string{key, key + waitingSuffix, key + fenceSuffix}, token, ms(ttl), flag, ms(mark))
	if err != nil || v <= 0 {
		return false, 0, err
	}
	if !fenced {
		v = 0
	}
	return true, v, nil
}

// On a Redis Cluster the key is mapped as for every other call
// (clusterKey), so the readers, the mark and the fence counter share its
// hash slot, and the last reader's release announces with SPUBLISH.

var _ redlock.RWLocker = (*clusterNode)(nil)

func (g *clusterNode) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	return g.node.AcquireRead(ctx, k, token, ttl)
}

func (g *clusterNode) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.node.RaiseReadFence(ctx, k, token, fence)
}

func (g *clusterNode) ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.releaseRead(ctx, k, token, announce, "2") // SPUBLISH
}

func (g *clusterNode) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	return g.node.ExtendRead(ctx, k, token, ttl)
}

func (g *clusterNode) AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	return g.node.AcquireWrite(ctx, k, token, ttl, mark, fenced)
}
