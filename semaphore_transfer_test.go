package redlock_test

// Permits handed over: a permit's Unlock transfers its slot to a waiter
// of the same locker in one round (handoff.go, semaphore.go).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transferSemaphore is a semaphore of permits over transferNodes(3): TTL 5 s,
// waiters retrying after a second only (what they get sooner, they get
// from a hand-off).
func transferSemaphore(t *testing.T, permits int, opts ...redlock.Option) (*redlock.Redlock, *redlock.Semaphore, []*fakenode.Node) {
	t.Helper()
	rl, ns := transferNodes(t, 3, opts...)
	sem, err := redlock.NewSemaphore(rl, "xfer", permits)
	require.NoError(t, err)
	return rl, sem, ns
}

// attempts counts the acquire calls the nodes saw, fenced or not.
func attempts(ns []*fakenode.Node) int {
	return calls(ns, fakenode.Acquire) + calls(ns, fakenode.AcquireFenced)
}

// semWaitFor starts an Acquire of sem on rl and returns once the call
// stands in every slot's line and has made its attempts: when it is the
// first to wait (first), a pass over the slots and, once subscribed, one
// attempt on each slot; behind others of its locker, none.
func semWaitFor(t *testing.T, ctx context.Context, rl *redlock.Redlock, sem *redlock.Semaphore, ns []*fakenode.Node, first bool) <-chan lockResult {
	t.Helper()
	k := sem.Permits()
	before := make([]int, k)
	for i := range k {
		before[i] = redlock.InLine(rl, sem.SlotKey(i))
	}
	want := attempts(ns)
	if first {
		want += 2 * k * len(ns)
	}
	ch := make(chan lockResult, 1)
	go func() {
		l, err := sem.Acquire(ctx)
		ch <- lockResult{l, err}
	}()
	for i := range k {
		testwait.Until(t, "the waiter stands in line", func() bool { return redlock.InLine(rl, sem.SlotKey(i)) > before[i] })
	}
	testwait.Until(t, "the waiter's attempts", func() bool { return attempts(ns) == want })
	return ch
}

// heldBack returns a channel that blocks the transfers of a test until the
// returned function (or the test's end, or the watchdog) closes it.
func heldBack(t *testing.T) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release) // a test that fails halfway leaves no call blocked
	stop := time.AfterFunc(watchdog, release)
	t.Cleanup(func() { stop.Stop() })
	return ch, release
}

// onTransfer makes every node run before() before each Transfer call.
func onTransfer(ns []*fakenode.Node, before func()) {
	for _, f := range ns {
		f.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
			if c.Op == fakenode.Transfer {
				before()
				return c.Send(context.WithoutCancel(ctx)) // late, but it lands
			}
			return c.Send(ctx)
		})
	}
}

// A permit's Unlock hands its slot to the locker's waiter in one transfer
// round: no release, no acquisition, a token of the waiter's own, the
// same slot, valid from the transfer round's start.
func TestSemaphoreTransferHandsThePermitOver(t *testing.T) {
	const pause = 100 * time.Millisecond
	rl, sem, ns := transferSemaphore(t, 2)
	held := fill(t, sem)
	got := semWaitFor(t, t.Context(), rl, sem, ns, true)
	acquires, releases := attempts(ns), calls(ns, fakenode.Release)
	onTransfer(ns, func() { time.Sleep(pause) })
	before := time.Now()
	require.NoError(t, held[1].Unlock(t.Context()))
	after := time.Now()
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, held[1].Slot(), r.l.Slot(), "the slot handed over")
	assert.Equal(t, held[1].Key(), r.l.Key())
	assert.NotEqual(t, held[1].Token(), r.l.Token())
	assert.Equal(t, 3, calls(ns, fakenode.Transfer), "one transfer per node")
	assert.Equal(t, acquires, attempts(ns), "the waiter made no attempt of its own")
	assert.Equal(t, releases, calls(ns, fakenode.Release), "nothing was released")
	// Valid from the round's start: before the nodes answered, each after
	// the pause.
	ttl := 5 * time.Second
	start := r.l.Until().Add(-(ttl - redlock.DriftFor(ttl, redlock.DefaultDriftFactor)))
	assert.False(t, start.Before(before), "validity counts from the transfer round, not earlier")
	assert.True(t, start.Before(after.Add(-pause)), "validity counts from the round's start, not its end (start at %v of the Unlock's %v)",
		start.Sub(before), after.Sub(before))
	assert.False(t, free(t, ns, r.l.Key()))
	assert.ErrorIs(t, held[1].Extend(t.Context(), ttl), redlock.ErrNotHeld, "the old token holds nothing")
	require.NoError(t, r.l.Unlock(t.Context()))
	require.NoError(t, held[0].Unlock(t.Context()))
	for i := range sem.Permits() {
		assert.True(t, free(t, ns, sem.SlotKey(i)), "slot %d released", i)
		assert.Zero(t, redlock.Joined(rl, sem.SlotKey(i)))
	}
}

// Two permits released at once with two waiters: each waiter is handed
// one, the second Unlock passing over the waiter the first is handing its
// permit to.
func TestSemaphoreTransferPassesOverAWaiterBeingHanded(t *testing.T) {
	rl, sem, ns := transferSemaphore(t, 2)
	held := fill(t, sem)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	w1 := semWaitFor(t, ctx, rl, sem, ns, true)
	w2 := semWaitFor(t, ctx, rl, sem, ns, false)
	proceed, release := heldBack(t)
	var blocked atomic.Bool
	onTransfer(ns, func() {
		if !blocked.Load() {
			<-proceed
		}
	})
	unlocked := make(chan error, 1)
	go func() { unlocked <- held[0].Unlock(t.Context()) }()
	testwait.Until(t, "the first transfer is under way", func() bool { return calls(ns, fakenode.Transfer) == 3 })
	blocked.Store(true)
	require.NoError(t, held[1].Unlock(t.Context()))
	r2 := <-w2
	require.NoError(t, r2.err)
	assert.Equal(t, held[1].Slot(), r2.l.Slot(), "the second waiter was handed the second permit")
	release()
	require.NoError(t, <-unlocked)
	r1 := <-w1
	require.NoError(t, r1.err)
	assert.Equal(t, held[0].Slot(), r1.l.Slot(), "the first waiter was handed the first permit")
	assert.Equal(t, 6, calls(ns, fakenode.Transfer), "two transfer rounds")
	assert.Zero(t, calls(ns, fakenode.Release), "nothing was released")
	require.NoError(t, r1.l.Unlock(t.Context()))
	require.NoError(t, r2.l.Unlock(t.Context()))
}

// Two permits released at once with one waiter: it holds one permit in
// the end, never two, and the other slot is free.
func TestSemaphoreTransferOnePermitPerCall(t *testing.T) {
	rl, sem, ns := transferSemaphore(t, 2)
	held := fill(t, sem)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	got := semWaitFor(t, ctx, rl, sem, ns, true)
	proceed, release := heldBack(t)
	onTransfer(ns, func() { <-proceed })
	unlocked := make(chan error, 1)
	go func() { unlocked <- held[0].Unlock(t.Context()) }()
	testwait.Until(t, "the transfer is under way", func() bool { return calls(ns, fakenode.Transfer) == 3 })
	require.NoError(t, held[1].Unlock(t.Context()), "released: the only waiter is being handed a permit")
	assert.Equal(t, 3, calls(ns, fakenode.Transfer), "one transfer round")
	release()
	require.NoError(t, <-unlocked)
	r := <-got
	require.NoError(t, r.err)
	other := sem.SlotKey(1 - r.l.Slot())
	assert.True(t, free(t, ns, other), "the permit the waiter did not take is free")
	assert.False(t, free(t, ns, r.l.Key()))
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.True(t, free(t, ns, r.l.Key()))
}

// A waiter whose Acquire ends while a permit is being handed to it never
// holds it: the permit is released, its slot free.
func TestSemaphoreTransferToAWaiterThatLeft(t *testing.T) {
	rl, sem, ns := transferSemaphore(t, 1)
	held := fill(t, sem)
	ctx, cancel := context.WithCancel(t.Context())
	got := semWaitFor(t, ctx, rl, sem, ns, true)
	proceed, release := heldBack(t)
	onTransfer(ns, func() { <-proceed })
	unlocked := make(chan error, 1)
	go func() { unlocked <- held[0].Unlock(t.Context()) }()
	testwait.Until(t, "the transfer is under way", func() bool { return calls(ns, fakenode.Transfer) == 3 })
	cancel()
	r := <-got
	assert.ErrorIs(t, r.err, context.Canceled)
	assert.Nil(t, r.l)
	release()
	require.NoError(t, <-unlocked)
	assert.True(t, free(t, ns, sem.SlotKey(0)), "the permit handed to nobody was released")
	assert.Zero(t, redlock.Joined(rl, sem.SlotKey(0)))
}

// Fenced permits are never handed over: the next holder needs a fencing
// token of its own, which only an acquisition issues.
func TestSemaphoreTransferNotFenced(t *testing.T) {
	rl, sem, ns := transferSemaphore(t, 1, redlock.WithFencing())
	held := fill(t, sem)
	got := semWaitFor(t, t.Context(), rl, sem, ns, true)
	require.NoError(t, held[0].Unlock(t.Context()))
	r := <-got
	require.NoError(t, r.err)
	assert.Zero(t, calls(ns, fakenode.Transfer))
	assert.Greater(t, r.l.Fence(), held[0].Fence())
	require.NoError(t, r.l.Unlock(t.Context()))
}

// Goroutines of one locker taking turns on permits: never more holders
// than permits, permits handed over, and never more than HandoffChain
// transfers of a slot in a row: a release then gives other lockers their
// chance.
func TestSemaphoreTransferChainIsBounded(t *testing.T) {
	rl, sem, ns := transferSemaphore(t, 2, redlock.WithStrategy(redlock.Retry(1000, 2*time.Millisecond)))
	var mu sync.Mutex
	ops := map[string][]fakenode.Op{} // node 0's transfers and releases, per slot
	ns[0].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		if c.Op == fakenode.Transfer || c.Op == fakenode.Release {
			mu.Lock()
			ops[c.Key] = append(ops[c.Key], c.Op)
			mu.Unlock()
		}
		return c.Send(ctx)
	})
	takeTurns(t, 5, 30, 2, func(ctx context.Context) (*redlock.Lock, error) { return sem.Acquire(ctx) }, nil)
	longest, transfers := 0, 0
	for _, seq := range ops {
		run := 0
		for _, op := range seq {
			if op == fakenode.Transfer {
				run++
				transfers++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
	}
	assert.Positive(t, transfers, "permits handed over")
	assert.LessOrEqual(t, longest, redlock.HandoffChain, "transfers of a slot in a row")
	for i := range sem.Permits() {
		assert.True(t, free(t, ns, sem.SlotKey(i)))
		assert.Zero(t, redlock.Joined(rl, sem.SlotKey(i)))
	}
}

// Goroutines of one locker taking turns on permits while every node, at
// random, loses replies (the command ran), fails calls (it did not run) or
// delivers them late (after the caller gave up): transfers that fall
// short, land late or are undone never let more holders in than permits,
// nor two into one slot.
func TestSemaphoreTransferUnderFaults(t *testing.T) {
	const permits = 2
	rl, sem, ns := transferSemaphore(t, permits, redlock.WithTTL(300*time.Millisecond), redlock.WithNodeTimeout(30*time.Millisecond),
		redlock.WithStrategy(redlock.Retry(100, 5*time.Millisecond)))
	late := injectFaults(t, ns...)
	defer late.Wait()
	chk := exclusion.New()
	chk.Bound(sem.Name(), permits)
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for g := range 5 {
		wg.Go(func() {
			for n := 0; time.Now().Before(stop); n++ {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				l, err := sem.Acquire(ctx)
				if err != nil {
					cancel()
					chk.Fail(exclusion.Other, err)
					continue
				}
				in := chk.EnterMany([]string{sem.Name(), l.Key()}, fmt.Sprintf("g%d#%d", g, n), l.Until())
				time.Sleep(time.Millisecond)
				in.Exit()
				_ = l.Unlock(ctx)
				cancel()
			}
		})
	}
	wg.Wait()
	assert.Empty(t, chk.Overlaps())
	assert.Positive(t, calls(ns, fakenode.Transfer), "permits handed over")
	assert.Equal(t, permits, chk.MostInside(sem.Name()), "the permits were all held at once: the bound was tested")
	for i := range permits {
		assert.Zero(t, redlock.Joined(rl, sem.SlotKey(i)))
	}
	t.Log(len(chk.Sections()), "sections,", calls(ns, fakenode.Transfer)/3, "transfer rounds")
}
