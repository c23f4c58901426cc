package rueidisnode

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// Peek reads the key's token and its fence counter with one MGET, an
// atomic read of both (redlock.Peeker), for leader election.
func (n *node) Peek(ctx context.Context, key string) (string, int64, error) {
	if err := ctx.Err(); err != nil {
		return "", 0, err // a caller that gave up sends nothing
	}
	vals, err := n.c.Do(ctx, n.c.B().Mget().Key(key, key+fenceSuffix).Build()).ToArray()
	if err != nil {
		return "", 0, err
	}
	if len(vals) != 2 {
		return "", 0, fmt.Errorf("rueidisnode: MGET %s: %d values, want 2", key, len(vals))
	}
	tok, err := vals[0].ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return "", 0, err
	}
	c, err := vals[1].ToString()
	if rueidis.IsRedisNil(err) {
		return tok, 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	fence, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("rueidisnode: fence counter %s%s is not an integer: %w", key, fenceSuffix, err)
	}
	return tok, fence, nil
}
