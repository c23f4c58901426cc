package goredis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Peek reads the key's token and its fence counter with one MGET, an
// atomic read of both (redlock.Peeker), for leader election.
func (g *node) Peek(ctx context.Context, key string) (string, int64, error) {
	cmd := redis.NewSliceCmd(ctx, "mget", key, key+fenceSuffix)
	if _, err := g.send(ctx, false, key, cmd); err != nil {
		return "", 0, err // cmd may still be in flight: read nothing from it
	}
	return parsePeek(key, cmd.Val())
}

// Peek on a cluster reads the mapped key (clusterKey), whose counter is in
// the same slot, so the MGET is one atomic read on one master.
func (g *clusterNode) Peek(ctx context.Context, key string) (string, int64, error) {
	k, err := clusterKey(key)
	if err != nil {
		return "", 0, err
	}
	tok, fence, err := g.node.Peek(ctx, k)
	return tok, fence, g.failed(err)
}

// parsePeek reads MGET's reply: nil for a missing key.
func parsePeek(key string, vals []any) (string, int64, error) {
	if len(vals) != 2 {
		return "", 0, fmt.Errorf("goredis: MGET %s: %d values, want 2", key, len(vals))
	}
	tok, _ := vals[0].(string)
	c, ok := vals[1].(string)
	if !ok {
		return tok, 0, nil
	}
	fence, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("goredis: fence counter %s%s is not an integer: %w", key, fenceSuffix, err)
	}
	return tok, fence, nil
}
