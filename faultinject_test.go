package redlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/fakenode"
)

// injectFaults makes every call to nodes, from now on, go wrong at random
// in the three ways a network can: 8 % lose their reply (the command ran),
// 4 % fail unsent, 4 % are delivered 40 ms after the caller gave up. The
// seed is logged. Wait on the returned group before the nodes go away:
// it holds the late deliveries.
func injectFaults(t *testing.T, nodes ...*fakenode.Node) *sync.WaitGroup {
	t.Helper()
	var late sync.WaitGroup
	var mu sync.Mutex
	seed := uint64(time.Now().UnixNano())
	t.Logf("fault seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 14))
	for _, f := range nodes {
		f.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
			mu.Lock()
			p := rng.IntN(100)
			mu.Unlock()
			switch {
			case p < 8: // lost reply
				c.Send(ctx)
				return fakenode.Result{Err: fakenode.ErrInjected}
			case p < 12: // never sent
				return fakenode.Result{Err: fakenode.ErrInjected}
			case p < 16: // delivered after the caller gave up
				late.Go(func() {
					time.Sleep(40 * time.Millisecond)
					c.Send(context.Background())
				})
				return fakenode.Result{Err: fakenode.ErrInjected}
			}
			return c.Send(ctx)
		})
	}
	return &late
}

// holdUntil locks key with lk again and again until stop, holding it for
// 1 ms each time under chk (holder prefix#n); a Lock call that fails is
// recorded in chk. An Unlock may fail under faults: exclusion is what
// counts.
func holdUntil(t *testing.T, lk redlock.Locker, key, prefix string, stop time.Time, chk *exclusion.Checker) {
	for n := 0; time.Now().Before(stop); n++ {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		l, err := lk.Lock(ctx, key)
		if err != nil {
			cancel()
			chk.Fail(exclusion.Other, err)
			continue
		}
		in := chk.Enter(key, fmt.Sprintf("%s#%d", prefix, n), l.Until())
		time.Sleep(time.Millisecond)
		in.Exit()
		_ = l.Unlock(ctx)
		cancel()
	}
}
