package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setLocker is a locker over bs.
func setLocker(t *testing.T, bs []driver.Node, opts ...redlock.Option) redlock.Locker {
	t.Helper()
	return lockerFor(t, bs, opts...)
}

var rejectOpts = []redlock.Option{redlock.WithTTL(5 * time.Second), redlock.WithStrategy(redlock.Reject())}

// TestLockManyAllOrNothingOnANode: a node that holds one key of a set
// sets none of the others.
func TestLockManyAllOrNothingOnANode(t *testing.T) {
	ms, bs := minis(t, 1)
	lk := setLocker(t, bs, rejectOpts...)
	b, err := lk.Lock(t.Context(), "b")
	require.NoError(t, err)
	_, err = lk.LockMany(t.Context(), []string{"c", "b", "a"})
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.False(t, ms[0].Exists("a"), "a refused set leaves no key")
	assert.False(t, ms[0].Exists("c"), "a refused set leaves no key")
	require.NoError(t, b.Unlock(t.Context()))

	l, err := lk.LockMany(t.Context(), []string{"c", "b", "a", "b"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, l.Keys(), "sorted, without duplicates")
	assert.Equal(t, "[a b c]", l.Key())
	for _, k := range l.Keys() {
		v, err := ms[0].Get(k)
		require.NoError(t, err)
		assert.Equal(t, l.Token(), v, "every key holds the token")
	}
	require.NoError(t, l.Extend(t.Context(), 5*time.Second))
	require.NoError(t, l.Unlock(t.Context()))
	assert.Empty(t, ms[0].Keys(), "Unlock deletes every key")
}

// TestLockManyExclusion: overlapping sets exclude each other, and a set
// and a single-key lock on one of its keys exclude each other, both ways.
func TestLockManyExclusion(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			lk := setLocker(t, bs, rejectOpts...)
			ab, err := lk.LockMany(t.Context(), []string{"a", "b"})
			require.NoError(t, err)
			_, err = lk.LockMany(t.Context(), []string{"b", "c"})
			assert.ErrorIs(t, err, redlock.ErrNotAcquired, "sets sharing b")
			_, err = lk.Lock(t.Context(), "a")
			assert.ErrorIs(t, err, redlock.ErrNotAcquired, "a single key of a held set")
			cd, err := lk.LockMany(t.Context(), []string{"c", "d"})
			require.NoError(t, err, "a disjoint set")
			require.NoError(t, ab.Unlock(t.Context()))
			a, err := lk.Lock(t.Context(), "a")
			require.NoError(t, err)
			_, err = lk.LockMany(t.Context(), []string{"a", "e"})
			assert.ErrorIs(t, err, redlock.ErrNotAcquired, "a set with a singly held key")
			require.NoError(t, a.Unlock(t.Context()))
			require.NoError(t, cd.Unlock(t.Context()))
		})
	}
}

func TestLockManyBadInput(t *testing.T) {
	_, bs := minis(t, 1)
	lk := setLocker(t, bs, rejectOpts...)
	tooMany := make([]string, redlock.MaxKeys+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("k%d", i)
	}
	for name, keys := range map[string][]string{
		"none": nil, "empty": {}, "empty key": {"a", ""}, "too many": tooMany,
	} {
		_, err := lk.LockMany(t.Context(), keys)
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		err = lk.DoMany(t.Context(), keys, func(context.Context) error { return nil })
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
	l, err := lk.LockMany(t.Context(), append(tooMany[:redlock.MaxKeys], "k0", "k1"))
	require.NoError(t, err, "MaxKeys distinct keys, with duplicates")
	assert.Len(t, l.Keys(), redlock.MaxKeys)
	require.NoError(t, l.Unlock(t.Context()))
	assert.ErrorIs(t, lk.DoMany(t.Context(), []string{"a"}, nil), redlock.ErrInvalid, "nil function")
	//nolint:staticcheck // a nil context on purpose
	_, err = lk.LockMany(nil, []string{"a"})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "nil context")

}

// TestLockManyRollbackLeavesNoKey: a set granted by one node of three and
// refused by the others is rolled back there, every key.
func TestLockManyRollbackLeavesNoKey(t *testing.T) {
	ms, bs := minis(t, 3)
	for _, m := range ms[1:] {
		require.NoError(t, m.Set("b", "someone"))
	}
	lk := setLocker(t, bs, rejectOpts...)
	_, err := lk.LockMany(t.Context(), []string{"a", "b", "c"})
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Empty(t, ms[0].Keys(), "node 0 granted, then was rolled back")
}

// TestLockManyExtendAndUnlockAPartlyExpiredSet: a set of which one key
// expired on a node is not held there: Extend does not count the node
// and changes nothing there; Unlock deletes the rest.
func TestLockManyExtendAndUnlockAPartlyExpiredSet(t *testing.T) {
	ms, bs := minis(t, 1)
	lk := setLocker(t, bs, rejectOpts...)
	l, err := lk.LockMany(t.Context(), []string{"a", "b"})
	require.NoError(t, err)
	ms[0].Del("a")
	ttl := ms[0].TTL("b")
	require.ErrorIs(t, l.Extend(t.Context(), time.Minute), redlock.ErrNotHeld)
	assert.Equal(t, ttl, ms[0].TTL("b"), "a partial set is not extended")
	assert.False(t, ms[0].Exists("a"), "Extend never re-creates a key")
	require.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld)
	assert.False(t, ms[0].Exists("b"), "Unlock deletes what still holds the token")
}

// TestLockManyFences: each key's fence strictly increases across single
// and set holders, and a set's fences come in Keys order.
func TestLockManyFences(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			lk := setLocker(t, bs, append(rejectOpts, redlock.WithFencing())...)
			last := map[string]int64{}
			take := func(keys ...string) {
				t.Helper()
				l, err := lk.LockMany(t.Context(), keys)
				require.NoError(t, err)
				require.Len(t, l.Fences(), len(l.Keys()))
				assert.Equal(t, l.Fences()[0], l.Fence())
				for i, k := range l.Keys() {
					assert.Greater(t, l.Fences()[i], last[k], "fence of %s", k)
					last[k] = l.Fences()[i]
				}
				require.NoError(t, l.Unlock(t.Context()))
			}
			single, err := lk.Lock(t.Context(), "b")
			require.NoError(t, err)
			last["b"] = single.Fence()
			require.NoError(t, single.Unlock(t.Context()))
			take("c", "b")
			take("a", "b", "c")
			take("c")
			single, err = lk.Lock(t.Context(), "c")
			require.NoError(t, err)
			assert.Greater(t, single.Fence(), last["c"], "a single holder after sets")
			require.NoError(t, single.Unlock(t.Context()))
		})
	}
}

// TestDoManyRenewsAndCancelsOnLoss: DoMany extends the whole set while
// fn runs, and cancels fn's context when the set is lost (here one key
// vanished from the node).
func TestDoManyRenewsAndCancelsOnLoss(t *testing.T) {
	ms, bs := minis(t, 1)
	var extended atomic.Int64
	obs := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventExtend && e.Err == nil {
			extended.Add(1)
		}
	})
	lk := setLocker(t, bs, redlock.WithTTL(time.Second), redlock.WithRenewEvery(20*time.Millisecond), redlock.WithObserver(obs))
	err := lk.DoMany(t.Context(), []string{"b", "a"}, func(ctx context.Context) error {
		l, ok := redlock.FromContext(ctx)
		require.True(t, ok)
		assert.Equal(t, []string{"a", "b"}, l.Keys())
		testwait.Until(t, "three extensions of the set", func() bool { return extended.Load() >= 3 })
		ms[0].Del("b")
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
		return nil
	})
	assert.ErrorIs(t, err, redlock.ErrLockLost)
	assert.False(t, ms[0].Exists("a"), "released after the loss")
}

// TestLockManyHandoff: a waiter for a set wakes when the key it was
// refused on is released, long before its backoff delay (an hour) would
// end.
func TestLockManyHandoff(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			holder := setLocker(t, bs, rejectOpts...)
			waiter := setLocker(t, bs, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			held, err := holder.Lock(t.Context(), "b")
			require.NoError(t, err)
			got := make(chan error, 1)
			go func() {
				l, err := waiter.LockMany(t.Context(), []string{"a", "b", "c"})
				if err == nil {
					err = l.Unlock(t.Context())
				}
				got <- err
			}()
			testwait.Until(t, "the set waiter in line", func() bool { return redlock.Waiting(waiter, "[a b c]") })
			require.NoError(t, held.Unlock(t.Context()))
			require.NoError(t, <-got, "woken by the release of b")
		})
	}
}

// TestLockManyOppositeOrders: callers asking for the same keys in
// opposite orders, with overlapping sets and single keys among them,
// all finish (no deadlock, no livelock) and never overlap on a key.
func TestLockManyOppositeOrders(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			opts := []redlock.Option{redlock.WithTTL(5 * time.Second), redlock.WithStrategy(redlock.Retry(200, 5*time.Millisecond))}
			sets := [][]string{{"x", "y", "z"}, {"z", "y", "x"}, {"y", "x"}, {"z"}, {"x", "z"}}
			runSets(t, bs, sets, 10, opts)
		})
	}
}

// runSets has one locker per set take it rounds times; each holder marks
// its keys in use and fails on a key already in use.
func runSets(t *testing.T, bs []driver.Node, sets [][]string, rounds int, opts []redlock.Option) {
	var mu sync.Mutex
	inUse := map[string]bool{}
	mark := func(keys []string, on bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if on && inUse[k] {
				t.Errorf("two holders of %s", k)
			}
			inUse[k] = on
		}
	}
	var wg sync.WaitGroup
	for _, set := range sets {
		lk := setLocker(t, bs, opts...)
		wg.Go(func() {
			for range rounds {
				err := lk.DoMany(t.Context(), set, func(ctx context.Context) error {
					mark(set, true)
					time.Sleep(time.Millisecond)
					mark(set, false)
					return nil
				})
				if err != nil {
					t.Errorf("%s: %v", strings.Join(set, ","), err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRealServersLockMany: the rules above on redis-server processes, 1,
// 3 and 5 of them: all or nothing, exclusion both ways, fences per key,
// hand-off, and callers in opposite orders.
func TestRealServersLockMany(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			lk := setLocker(t, bs, append(rejectOpts, redlock.WithFencing())...)
			single, err := lk.Lock(t.Context(), "real:b")
			require.NoError(t, err)
			_, err = lk.LockMany(t.Context(), []string{"real:a", "real:b"})
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a set with a singly held key")
			require.NoError(t, single.Unlock(t.Context()))
			set, err := lk.LockMany(t.Context(), []string{"real:b", "real:a"})
			require.NoError(t, err)
			assert.Greater(t, set.Fences()[1], single.Fence(), "b's fence after its single holder")
			_, err = lk.Lock(t.Context(), "real:a")
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a single key of a held set")
			_, err = lk.LockMany(t.Context(), []string{"real:a", "real:c"})
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "an overlapping set")
			require.NoError(t, set.Extend(t.Context(), 5*time.Second))
			require.NoError(t, set.Unlock(t.Context()))

			opts := []redlock.Option{redlock.WithTTL(5 * time.Second), redlock.WithStrategy(redlock.Retry(400, 5*time.Millisecond))}
			runSets(t, bs, [][]string{{"real:x", "real:y"}, {"real:y", "real:x"}, {"real:x"}, {"real:y", "real:z"}}, 10, opts)
		})
	}
}

// TestRealServersLockManyHandoff: a set waiter on redis-server wakes on
// the release of the key it was refused on, within a backoff delay of an
// hour.
func TestRealServersLockManyHandoff(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			holder := setLocker(t, bs, rejectOpts...)
			waiter := setLocker(t, bs, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			held, err := holder.LockMany(t.Context(), []string{"h:b", "h:c"})
			require.NoError(t, err)
			got := make(chan error, 1)
			go func() {
				l, err := waiter.LockMany(t.Context(), []string{"h:a", "h:b"})
				if err == nil {
					err = l.Unlock(t.Context())
				}
				got <- err
			}()
			testwait.Until(t, "the set waiter in line", func() bool { return redlock.Waiting(waiter, "[h:a h:b]") })
			require.NoError(t, held.Unlock(t.Context()))
			require.NoError(t, <-got, "woken by the release of the holder's set")
		})
	}
}

// TestSingleKeyWaiterWokenBySetRelease: a set's release announces each of
// its keys, so a single-key waiter for one of them wakes at once.
func TestSingleKeyWaiterWokenBySetRelease(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			holder := setLocker(t, bs, rejectOpts...)
			waiter := setLocker(t, bs, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			held, err := holder.LockMany(t.Context(), []string{"a", "b"})
			require.NoError(t, err)
			got := make(chan error, 1)
			go func() {
				l, err := waiter.Lock(t.Context(), "b")
				if err == nil {
					err = l.Unlock(t.Context())
				}
				got <- err
			}()
			testwait.Until(t, "the single-key waiter in line", func() bool { return redlock.Waiting(waiter, "b") })
			require.NoError(t, held.Unlock(t.Context()))
			require.NoError(t, <-got, "woken by the set's release")
		})
	}
}
