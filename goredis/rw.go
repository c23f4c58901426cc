package goredis

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// The redlock.RWLocker capability: read-write locks, one script per call
// (redlock.Lua's *Read and AcquireWrite scripts). A key's readers live in
// key + readersSuffix, its "writer waiting" mark in key + waitingSuffix;
// on a Redis Cluster node clusterKey puts both in the key's hash slot.

const (
	readersSuffix = ":readers"
	waitingSuffix = ":writer-waiting"
)

var (
	acquireReadScript    = newScript(redlock.Lua.AcquireRead)
	raiseReadFenceScript = newScript(redlock.Lua.RaiseReadFence)
	releaseReadScript    = newScript(redlock.Lua.ReleaseRead)
	extendReadScript     = newScript(redlock.Lua.ExtendRead)
	acquireWriteScript   = newScript(redlock.Lua.AcquireWrite)
)

func (g *node) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	n, wait, err := g.exec(ctx, true, acquireReadScript, 4,
		key, key+readersSuffix, key+waitingSuffix, key+fenceSuffix, token, ttl.Milliseconds())
	if err != nil || n < 0 {
		return false, 0, err
	}
	if err := g.acked(wait); err != nil {
		return false, 0, err // made, maybe lost in a failover: may have happened
	}
	return true, n, nil
}

func (g *node) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	n, wait, err := g.exec(ctx, true, raiseReadFenceScript, 3, key, key+readersSuffix, key+fenceSuffix, token, fence)
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err
	}
	return true, nil
}

func (g *node) ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	flag := "0"
	if announce {
		flag = "1"
	}
	return g.releaseRead(ctx, key, token, flag)
}

func (g *node) releaseRead(ctx context.Context, key, token, flag string) (bool, error) {
	n, err := g.run(ctx, releaseReadScript, 2, key, key+readersSuffix, token, flag)
	return err == nil && n == 1, err
}

func (g *node) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, wait, err := g.exec(ctx, true, extendReadScript, 2, key, key+readersSuffix, token, ttl.Milliseconds())
	if err != nil || n != 1 {
		return false, err
	}
	if err := g.acked(wait); err != nil {
		return false, err
	}
	return true, nil
}

func (g *node) AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (bool, int64, error) {
	flag := "0"
	if fenced {
		flag = "1"
	}
	n, wait, err := g.exec(ctx, true, acquireWriteScript, 3, key, key+waitingSuffix, key+fenceSuffix,
		token, ttl.Milliseconds(), flag, mark.Milliseconds())
	if err != nil || n <= 0 {
		return false, 0, err
	}
	if err := g.acked(wait); err != nil {
		return false, 0, err
	}
	if !fenced {
		n = 0
	}
	return true, n, nil
}

func (g *clusterNode) AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	ok, f, err := g.node.AcquireRead(ctx, k, token, ttl)
	return ok, f, g.failed(err)
}

func (g *clusterNode) RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.RaiseReadFence(ctx, k, token, fence)
	return ok, g.failed(err)
}

func (g *clusterNode) ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	flag := "0"
	if announce {
		flag = "2" // SPUBLISH
	}
	ok, err := g.releaseRead(ctx, k, token, flag)
	return ok, g.failed(err)
}

func (g *clusterNode) ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, err
	}
	ok, err := g.node.ExtendRead(ctx, k, token, ttl)
	return ok, g.failed(err)
}

func (g *clusterNode) AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (bool, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return false, 0, err
	}
	ok, f, err := g.node.AcquireWrite(ctx, k, token, ttl, mark, fenced)
	return ok, f, g.failed(err)
}

var (
	_ redlock.RWLocker = (*node)(nil)
	_ redlock.RWLocker = (*clusterNode)(nil)
)
