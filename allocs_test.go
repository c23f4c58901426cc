package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An attempt's token is a random UUID v4, then the suffix (a campaign's
// value), made in one allocation.
func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := redlock.NewToken("|leader-1")
		random, value, ok := strings.Cut(tok, "|")
		require.True(t, ok, tok)
		assert.Equal(t, "leader-1", value)
		u, err := uuid.Parse(random)
		require.NoError(t, err, tok)
		assert.Equal(t, uuid.Version(4), u.Version())
		assert.Equal(t, uuid.RFC4122, u.Variant())
		assert.Equal(t, random, u.String(), "canonical form, lower case")
		assert.False(t, seen[random], "a token repeated")
		seen[random] = true
	}
	assert.Len(t, redlock.NewToken(""), 36)
	if redlock.RaceEnabled {
		return // the race detector allocates on its own
	}
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = redlock.NewToken("") }))
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = redlock.NewToken("|leader-1") }))
}

// The core's own allocations per operation, over fake nodes that answer
// at once without a network (a fakenode hook that never sends), so the
// count is exact and independent of timing. The bounds are what the core
// makes today: a change that adds an allocation on these paths fails
// here and must say why. Counted without the race detector, which
// allocates on its own.
//
// At one node a Lock+Unlock is, beside the fake node's allocations per
// call: the token, the Lock, each round's fan (its context and outcomes,
// quorum.go) and its call, and per script call its keys and arguments
// (one array) and the TTL in text; over several nodes, each round's func
// value for its goroutines too. WithFencing adds the fence counters and a
// longer key list per call.
func TestAllocationsPerOperation(t *testing.T) {
	if redlock.RaceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	_, raw := minis(t, 3)
	bs, ns := fakenode.WrapAll(raw)
	var held atomic.Bool // the fake nodes refuse acquisitions
	for _, n := range ns {
		n.SetHook(func(_ context.Context, c fakenode.Call) fakenode.Result {
			if c.Op == fakenode.Acquire && held.Load() {
				return fakenode.Result{Reply: int64(0)}
			}
			return fakenode.Result{Reply: int64(1)}
		})
	}
	ctx := context.Background()
	for _, c := range []struct {
		nodes                                           int
		lockUnlock, withOption, fenced, tryHeld, extend float64
	}{
		{1, 11, 12, 17, 8, 5},
		{3, 23, 24, 35, 15, 12},
	} {
		t.Run(fmt.Sprintf("N=%d", c.nodes), func(t *testing.T) {
			opts := []redlock.Option{redlock.WithTTL(10 * time.Second), redlock.WithStrategy(redlock.Reject())}
			lk := lockerFor(t, bs[:c.nodes], opts...)
			held.Store(false)
			lockUnlock := func(opts ...redlock.Option) func() {
				return func() {
					l, err := lk.Lock(ctx, "k", opts...)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			assert.LessOrEqual(t, testing.AllocsPerRun(100, lockUnlock()), c.lockUnlock, "Lock+Unlock")
			assert.LessOrEqual(t, testing.AllocsPerRun(100, lockUnlock(redlock.WithTTL(time.Minute))), c.withOption,
				"Lock+Unlock with an option: one allocation more, the call's configuration")
			assert.LessOrEqual(t, testing.AllocsPerRun(100, lockUnlock(redlock.WithFencing())), c.fenced, "fenced Lock+Unlock")

			l, err := lk.Lock(ctx, "k")
			require.NoError(t, err)
			assert.LessOrEqual(t, testing.AllocsPerRun(100, func() {
				if err := l.Extend(ctx, 10*time.Second); err != nil {
					t.Fatal(err)
				}
			}), c.extend, "Extend")
			require.NoError(t, l.Unlock(ctx))

			held.Store(true)
			assert.LessOrEqual(t, testing.AllocsPerRun(100, func() {
				if _, err := lk.Lock(ctx, "k"); !errors.Is(err, redlock.ErrNotAcquired) {
					t.Fatalf("a held key was not refused: %v", err)
				}
			}), c.tryHeld, "a refused attempt (TryLockHeld)")
		})
	}
}
