package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/stretchr/testify/require"
)

// majorities returns every set of 3 of 5 node indexes.
func majorities() [][]int {
	var out [][]int
	for a := 0; a < 5; a++ {
		for b := a + 1; b < 5; b++ {
			for c := b + 1; c < 5; c++ {
				out = append(out, []int{a, b, c})
			}
		}
	}
	return out
}

// reachOnly makes the nodes outside reach fail every call, as a
// partition that leaves the caller the majority reach.
func reachOnly(ns []*fakenode.Node, reach []int) {
	for i, n := range ns {
		if slices.Contains(reach, i) {
			n.SetHook(nil)
			continue
		}
		n.SetHook(func(context.Context, fakenode.Call) fakenode.Result {
			return fakenode.Result{Err: fakenode.ErrInjected}
		})
	}
}

// TestRWQuorumIntersection: over 5 nodes, for every two majorities A and
// B, a reader granted on A and a writer on B (either first), or two
// writers, are never both granted: the node they share refuses the
// second. Two readers are (readers share).
func TestRWQuorumIntersection(t *testing.T) {
	_, raw := minis(t, 5)
	bs, ns := fakenode.WrapAll(raw)
	lk := rwLocker(t, bs, rejectOpts...)
	kinds := map[string]func(context.Context, string, ...redlock.Option) (*redlock.Lock, error){"reader": lk.RLock, "writer": lk.WLock}
	pairs := [][2]string{{"reader", "writer"}, {"writer", "reader"}, {"writer", "writer"}, {"reader", "reader"}}
	maj := majorities()
	for _, p := range pairs {
		for _, a := range maj {
			for _, b := range maj {
				if p == [2]string{"reader", "reader"} && (a[0] != 0 || b[0] != 2) {
					continue // readers: a few pairs show that they share
				}
				reachOnly(ns, a)
				first, err := kinds[p[0]](t.Context(), "doc")
				require.NoError(t, err, "%s on %v", p[0], a)
				reachOnly(ns, b)
				second, err := kinds[p[1]](t.Context(), "doc")
				name := fmt.Sprintf("%s on %v then %s on %v", p[0], a, p[1], b)
				if p == [2]string{"reader", "reader"} {
					require.NoError(t, err, name)
				} else {
					require.ErrorIs(t, err, redlock.ErrNotAcquired, name)
				}
				reachOnly(ns, []int{0, 1, 2, 3, 4})
				require.NoError(t, first.Unlock(t.Context()), name)
				if second != nil {
					require.NoError(t, second.Unlock(t.Context()), name)
				}
			}
		}
	}
}
