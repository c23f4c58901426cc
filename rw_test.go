package redlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rwLocker is a locker over bs.
func rwLocker(t *testing.T, bs []driver.Node, opts ...redlock.Option) redlock.Locker {
	t.Helper()
	return lockerFor(t, bs, opts...)
}

// checkReadersThenWriter: readers share key, and while they hold a
// writer, a mutex and a set with the key are refused; a mutex excludes
// readers; a writer refuses readers, mutexes and other writers.
func checkReadersThenWriter(t *testing.T, bs []driver.Node, key string) {
	lk := rwLocker(t, bs, rejectOpts...)
	var readers []*redlock.Lock
	for range 3 {
		r, err := lk.RLock(t.Context(), key)
		require.NoError(t, err, "readers share the key")
		readers = append(readers, r)
	}
	_, err := lk.WLock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a writer while readers hold")
	_, err = lk.Lock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a mutex while readers hold")
	_, err = lk.(redlock.Locker).LockMany(t.Context(), []string{key, key + "-other"})
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a set with the key while readers hold")
	for _, r := range readers {
		require.NoError(t, r.Extend(t.Context(), 5*time.Second))
		require.NoError(t, r.Unlock(t.Context()))
	}
	m, err := lk.Lock(t.Context(), key)
	require.NoError(t, err, "a mutex once the readers left")
	_, err = lk.RLock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader while a mutex holds")
	require.NoError(t, m.Unlock(t.Context()))
	r, err := lk.RLock(t.Context(), key)
	require.NoError(t, err, "a reader once the mutex left (a mutex leaves no mark)")
	require.NoError(t, r.Unlock(t.Context()))

	w, err := lk.WLock(t.Context(), key)
	require.NoError(t, err, "the writer once the readers left (its own mark does not stop it)")
	_, err = lk.RLock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader while the writer holds")
	_, err = lk.WLock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a second writer")
	_, err = lk.Lock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a mutex while the writer holds")
	require.NoError(t, w.Extend(t.Context(), 5*time.Second))
	require.NoError(t, w.Unlock(t.Context()))

}

// TestRWReadersShareWritersExclude: the rules of checkReadersThenWriter
// on miniredis, one node and three; nothing is left on the nodes.
func TestRWReadersShareWritersExclude(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ms, bs := minis(t, n)
			checkReadersThenWriter(t, bs, "doc")
			for _, m := range ms {
				for _, k := range m.Keys() {
					assert.Contains(t, []string{"doc:writer-waiting"}, k, "only a refused writer's mark may remain")
				}
			}
		})
	}
}

// checkWriterPreference: a writer waiting for a reader makes new readers
// wait, and gets the key when the reader leaves, woken by its release
// (its backoff delay is an hour).
func checkWriterPreference(t *testing.T, bs []driver.Node, key string) {
	lk := rwLocker(t, bs, rejectOpts...)
	waiting := rwLocker(t, bs, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(10, time.Hour)))
	r1, err := lk.RLock(t.Context(), key)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		w, err := waiting.WLock(t.Context(), key)
		if err == nil {
			err = w.Unlock(t.Context())
		}
		got <- err
	}()
	testwait.Until(t, "the writer waiting", func() bool { return redlock.Waiting(waiting, key) })
	_, err = lk.RLock(t.Context(), key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a new reader while a writer waits")
	require.NoError(t, r1.Unlock(t.Context()))
	require.NoError(t, <-got, "the writer, woken by the last reader's release")
}

// TestRWWriterPreference: checkWriterPreference on miniredis.
func TestRWWriterPreference(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			checkWriterPreference(t, bs, "doc")
		})
	}
}

// TestRWReaderWokenByWriterRelease: a reader waiting for a writer wakes on
// its release, within a backoff delay of an hour.
func TestRWReaderWokenByWriterRelease(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			lk := rwLocker(t, bs, rejectOpts...)
			waiting := rwLocker(t, bs, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(10, time.Hour)))
			w, err := lk.WLock(t.Context(), "doc")
			require.NoError(t, err)
			got := make(chan error, 1)
			go func() {
				got <- waiting.DoRead(t.Context(), "doc", func(context.Context) error { return nil })
			}()
			testwait.Until(t, "the reader waiting", func() bool { return redlock.Waiting(waiting, "doc") })
			require.NoError(t, w.Unlock(t.Context()))
			require.NoError(t, <-got)
		})
	}
}

// TestRWCrashedReaderExpires: a reader that never unlocks loses its share
// at its own deadline: the next reader's release then frees the key for a
// writer, and an expired share cannot be extended.
func TestRWCrashedReaderExpires(t *testing.T) {
	ms, bs := minis(t, 1)
	start := time.Now()
	ms[0].SetTime(start) // the scripts' TIME
	short := rwLocker(t, bs, redlock.WithTTL(time.Second), redlock.WithStrategy(redlock.Reject()))
	lk := rwLocker(t, bs, rejectOpts...)
	crashed, err := short.RLock(t.Context(), "doc")
	require.NoError(t, err)
	r, err := lk.RLock(t.Context(), "doc")
	require.NoError(t, err)

	ms[0].SetTime(start.Add(2 * time.Second))
	ms[0].FastForward(2 * time.Second)
	require.ErrorIs(t, crashed.Extend(t.Context(), time.Second), redlock.ErrNotHeld, "an expired share is not revived")
	_, err = lk.WLock(t.Context(), "doc")
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "the live reader still holds")
	require.NoError(t, r.Unlock(t.Context()))
	assert.False(t, ms[0].Exists("doc"), "the last live reader's release deletes the key")
	w, err := lk.WLock(t.Context(), "doc")
	require.NoError(t, err, "the crashed reader does not hold the key")
	require.NoError(t, w.Unlock(t.Context()))
}

// TestRWLoneCrashedReaderExpires: the key of a lone reader that never
// unlocks expires with its TTL.
func TestRWLoneCrashedReaderExpires(t *testing.T) {
	ms, bs := minis(t, 1)
	lk := rwLocker(t, bs, rejectOpts...)
	_, err := lk.RLock(t.Context(), "doc")
	require.NoError(t, err)
	ms[0].FastForward(6 * time.Second)
	w, err := lk.WLock(t.Context(), "doc")
	require.NoError(t, err)
	require.NoError(t, w.Unlock(t.Context()))
}

// TestRWFences: a writer's fence is above every earlier writer's and
// mutex's; a reader gets the latest writer's, unchanged.
func TestRWFences(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := minis(t, n)
			lk := rwLocker(t, bs, append(rejectOpts, redlock.WithFencing())...)
			r0, err := lk.RLock(t.Context(), "doc")
			require.NoError(t, err)
			assert.Positive(t, r0.Fence(), "no writer yet: a counter started from the node's clock")
			require.NoError(t, r0.Unlock(t.Context()))
			w1, err := lk.WLock(t.Context(), "doc")
			require.NoError(t, err)
			assert.Greater(t, w1.Fence(), r0.Fence(), "the next writer's token is above the reader's")
			require.NoError(t, w1.Unlock(t.Context()))
			r1, err := lk.RLock(t.Context(), "doc")
			require.NoError(t, err)
			assert.Equal(t, w1.Fence(), r1.Fence(), "a reader gets the latest writer's generation")
			require.NoError(t, r1.Unlock(t.Context()))
			m, err := lk.Lock(t.Context(), "doc")
			require.NoError(t, err)
			require.NoError(t, m.Unlock(t.Context()))
			w2, err := lk.WLock(t.Context(), "doc")
			require.NoError(t, err)
			assert.Greater(t, m.Fence(), w1.Fence())
			assert.Greater(t, w2.Fence(), m.Fence(), "writers and mutexes share one counter")
			require.NoError(t, w2.Unlock(t.Context()))
		})
	}
}

// TestRWRenewal: DoRead and DoWrite renew their lock while fn runs.
func TestRWRenewal(t *testing.T) {
	_, raw := minis(t, 3)
	bs, ns := fakenode.WrapAll(raw)
	lk := rwLocker(t, bs, redlock.WithTTL(300*time.Millisecond))
	for _, c := range []struct {
		do func(context.Context, string, func(context.Context) error, ...redlock.Option) error
		op fakenode.Op
	}{{lk.DoRead, fakenode.ExtendRead}, {lk.DoWrite, fakenode.Extend}} {
		err := c.do(t.Context(), "doc", func(ctx context.Context) error {
			testwait.Until(t, "two renewals", func() bool { return ns[0].Calls(c.op) >= 2 })
			return ctx.Err()
		})
		require.NoError(t, err, c.op)
	}
}

// TestRWBadInput: bad arguments and nodes without the capability are
// refused with ErrInvalid.
func TestRWBadInput(t *testing.T) {
	_, bs := minis(t, 1)
	lk := rwLocker(t, bs)
	_, err := lk.RLock(t.Context(), "")
	require.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = lk.WLock(nil, "k") //nolint:staticcheck // a nil context on purpose
	require.ErrorIs(t, err, redlock.ErrInvalid)
	require.ErrorIs(t, lk.DoRead(t.Context(), "k", nil), redlock.ErrInvalid)
	require.ErrorIs(t, lk.DoWrite(t.Context(), "k", nil), redlock.ErrInvalid)
	_, err = lk.RLock(t.Context(), "k", redlock.WithTTL(-1))
	require.ErrorIs(t, err, redlock.ErrInvalid)

}

// TestRealServersRW: the read-write rules on redis-server processes, 1,
// 3 and 5 of them: readers share, writers exclude, writer preference with
// hand-off, a crashed reader's share expiring on the servers' clock, and
// fences.
func TestRealServersRW(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, bs := realNodes(t, n)
			checkReadersThenWriter(t, bs, "rw:a")
			checkWriterPreference(t, bs, "rw:b")

			short := rwLocker(t, bs, redlock.WithTTL(200*time.Millisecond), redlock.WithStrategy(redlock.Reject()))
			lk := rwLocker(t, bs, append(rejectOpts, redlock.WithFencing())...)
			_, err := short.RLock(t.Context(), "rw:c") // never unlocked: a crashed reader
			require.NoError(t, err)
			r, err := lk.RLock(t.Context(), "rw:c")
			require.NoError(t, err)
			require.NoError(t, r.Unlock(t.Context()))
			_, err = lk.WLock(t.Context(), "rw:c")
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "the crashed reader holds until its share expires")
			var w *redlock.Lock
			testwait.Until(t, "the crashed reader's share to expire", func() bool {
				w, err = lk.WLock(t.Context(), "rw:c")
				return err == nil
			})
			assert.Positive(t, w.Fence())
			require.NoError(t, w.Unlock(t.Context()))
			r2, err := lk.RLock(t.Context(), "rw:c")
			require.NoError(t, err)
			assert.Equal(t, w.Fence(), r2.Fence(), "a reader gets the latest writer's generation")
			require.NoError(t, r2.Unlock(t.Context()))
		})
	}
}

// TestDoReadCancelsOnLoss: DoRead renews the reader's share while fn
// runs (the observer sees the extensions), and cancels fn's context when
// the share is lost (here its entry vanished from the node).
func TestDoReadCancelsOnLoss(t *testing.T) {
	ms, bs := minis(t, 1)
	var extended, acquired atomic.Int64
	obs := redlock.Observer(func(e redlock.Event) {
		switch {
		case e.Kind == redlock.EventExtend && e.Err == nil:
			extended.Add(1)
		case e.Kind == redlock.EventAcquire && e.Err == nil && e.Key == "doc":
			acquired.Add(1)
		}
	})
	lk := rwLocker(t, bs, redlock.WithTTL(time.Second), redlock.WithRenewEvery(20*time.Millisecond), redlock.WithObserver(obs))
	err := lk.DoRead(t.Context(), "doc", func(ctx context.Context) error {
		testwait.Until(t, "three extensions of the share", func() bool { return extended.Load() >= 3 })
		ms[0].Del("doc:readers")
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
		return nil
	})
	assert.ErrorIs(t, err, redlock.ErrLockLost)
	assert.Equal(t, int64(1), acquired.Load(), "the observer saw the reader's acquisition")
	assert.False(t, ms[0].Exists("doc"), "released after the loss: no reader left")
}
