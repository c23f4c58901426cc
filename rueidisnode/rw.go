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
	flag := "0"
	if announce {
		flag = "1"
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
