package envconfig

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/quorumlock/redlock/driver"
)

// alwaysGrant is the node of a disabled configuration: every script a
// lock runs answers "granted" at once, so every lock is granted, extended
// and released, even one already held. It issues fencing tokens from one
// counter for all keys (they increase for every key, within this process
// only), so code written WithFencing runs unchanged too. It is never mixed
// with a real node, and answers a script it does not know with an error.
type alwaysGrant struct {
	fence atomic.Int64
}

func (*alwaysGrant) Info() driver.Info { return driver.Info{Name: "disabled"} }

// Eval answers as the core's script of that name answers a grant.
func (g *alwaysGrant) Eval(_ context.Context, s *driver.Script, keys []string, args ...string) (any, error) {
	switch s.Name() {
	case "acquire", "release", "extend", "fence", "fence_read", "acquire_many", "extend_many", "fence_many",
		"release_read", "extend_read", "transfer", "acquire_fair", "release_fair":
		return int64(1), nil
	case "acquire_fenced":
		return g.fence.Add(1), nil
	case "acquire_write": // ARGV[3] "1": fenced
		if len(args) > 2 && args[2] == "1" {
			return g.fence.Add(1), nil
		}
		return int64(1), nil
	case "acquire_read":
		return g.fence.Load(), nil
	case "release_many":
		return int64(len(keys)), nil
	case "acquire_many_fenced":
		fences := make([]any, len(keys)/2)
		for i := range fences {
			fences[i] = g.fence.Add(1)
		}
		return fences, nil
	case "peek":
		return []any{nil, nil}, nil
	}
	return nil, fmt.Errorf("envconfig: a disabled configuration runs no script %q", s.Name())
}
