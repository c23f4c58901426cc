package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transferNodes starts n redis-servers and returns a Redlock over fake
// nodes wrapping them (Transferrer and Notifier passed through), and the
// fakes. Waiters retry after a second only: what they get sooner, they
// get from a hand-off.
func transferNodes(t *testing.T, n int, opts ...redlock.Option) (*redlock.Redlock, []*fakenode.Node) {
	t.Helper()
	c := redistest.Start(t, n)
	bs := make([]driver.Node, n)
	for i, addr := range c.Addrs() {
		bs[i] = node(t, redistest.Client(t, addr))
	}
	wrapped, ns := fakenode.WrapAll(bs)
	opts = append([]redlock.Option{redlock.WithTTL(5 * time.Second), redlock.WithStrategy(redlock.Retry(5, time.Second))}, opts...)
	rl, err := redlock.New(wrapped, opts...)
	require.NoError(t, err)
	return rl, ns
}

// waitFor starts a Lock of key on rl and returns once it stands in line.
func waitFor(t *testing.T, ctx context.Context, rl *redlock.Redlock, key string) <-chan lockResult {
	t.Helper()
	before := redlock.InLine(rl, key)
	ch := startLock(ctx, rl, key)
	testwait.Until(t, "the waiter stands in line", func() bool { return redlock.InLine(rl, key) > before })
	return ch
}

// startLock starts a Lock of key on rl, with opts, and returns where its
// result arrives.
func startLock(ctx context.Context, rl *redlock.Redlock, key string, opts ...redlock.Option) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := rl.Lock(ctx, key, opts...)
		ch <- lockResult{l, err}
	}()
	return ch
}

type lockResult struct {
	l   *redlock.Lock
	err error
}

func calls(ns []*fakenode.Node, op fakenode.Op) int {
	n := 0
	for _, f := range ns {
		n += f.Calls(op)
	}
	return n
}

// answered is calls for the calls that returned (fakenode.Node.Answered).
func answered(ns []*fakenode.Node, op fakenode.Op) int {
	n := 0
	for _, f := range ns {
		n += f.Answered(op)
	}
	return n
}

// free reports whether key is free on every node: a Reject Lock on each
// node alone succeeds.
func free(t *testing.T, ns []*fakenode.Node, key string) bool {
	t.Helper()
	for _, f := range ns {
		ok, err := redlock.On(f).Acquire(t.Context(), key, "probe", time.Second)
		require.NoError(t, err)
		if !ok {
			return false
		}
		_, err = redlock.On(f).Release(t.Context(), key, "probe", false)
		require.NoError(t, err)
	}
	return true
}

// Unlock hands the key to the locker's first waiter in one transfer
// round: no release, no new acquisition, and the waiter holds a token of
// its own.
func TestTransferHandsTheKeyToTheNextWaiter(t *testing.T) {
	rl, ns := transferNodes(t, 3)
	key := "transfer:next"
	held, err := rl.Lock(t.Context(), key)
	require.NoError(t, err)
	got := waitFor(t, t.Context(), rl, key)
	// Its first attempt, and the one right after subscribing.
	testwait.Until(t, "the waiter's two attempts", func() bool { return calls(ns, fakenode.Acquire) == 3+2*3 })
	acquires, releases := calls(ns, fakenode.Acquire), calls(ns, fakenode.Release)
	require.NoError(t, held.Unlock(t.Context()))
	r := <-got
	require.NoError(t, r.err)
	assert.NotEqual(t, held.Token(), r.l.Token())
	assert.Equal(t, 3, calls(ns, fakenode.Transfer), "one transfer per node")
	assert.Equal(t, acquires, calls(ns, fakenode.Acquire), "the waiter made no attempt of its own")
	assert.Equal(t, releases, calls(ns, fakenode.Release), "nothing was released")
	assert.True(t, time.Until(r.l.Until()) > 4*time.Second, "valid for the TTL from the transfer, less drift")
	assert.False(t, free(t, ns, key))
	assert.ErrorIs(t, held.Extend(t.Context(), 5*time.Second), redlock.ErrNotHeld, "the old token holds nothing")
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.True(t, free(t, ns, key), "the last holder released the key")
}

// A transfer that reaches too few nodes is undone: the new token is
// released wherever it may have landed, ours everywhere, and the waiter
// takes the key with an acquisition of its own after the announcement.
func TestTransferShortOfAQuorumIsUndone(t *testing.T) {
	rl, ns := transferNodes(t, 3)
	ns[0].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		if c.Op == fakenode.Transfer {
			c.Send(ctx) // landed, reply lost
			return fakenode.Result{Err: fakenode.ErrInjected}
		}
		return c.Send(ctx)
	})
	ns[1].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		if c.Op == fakenode.Transfer {
			return fakenode.Result{Err: fakenode.ErrInjected} // never sent
		}
		return c.Send(ctx)
	})
	key := "transfer:short"
	held, err := rl.Lock(t.Context(), key)
	require.NoError(t, err)
	got := waitFor(t, t.Context(), rl, key)
	require.NoError(t, held.Unlock(t.Context()), "our key left every node: transferred and undone, or released")
	r := <-got
	require.NoError(t, r.err)
	assert.Positive(t, calls(ns, fakenode.Acquire), "the waiter acquired")
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.True(t, free(t, ns, key), "nothing left behind")
}

// A waiter whose Lock call ends while a transfer to it is under way never
// holds the key: the transferred lock is released, and the key is free.
func TestTransferToAWaiterThatLeft(t *testing.T) {
	rl, ns := transferNodes(t, 3)
	proceed := make(chan struct{})
	for _, f := range ns {
		f.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
			if c.Op == fakenode.Transfer {
				<-proceed
				return c.Send(context.WithoutCancel(ctx)) // late, but it lands
			}
			return c.Send(ctx)
		})
	}
	key := "transfer:left"
	held, err := rl.Lock(t.Context(), key)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	got := waitFor(t, ctx, rl, key)
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(t.Context()) }()
	testwait.Until(t, "the transfer is under way", func() bool { return calls(ns, fakenode.Transfer) == 3 })
	cancel()
	r := <-got
	assert.ErrorIs(t, r.err, context.Canceled)
	assert.Nil(t, r.l)
	close(proceed)
	require.NoError(t, <-unlocked)
	assert.True(t, free(t, ns, key), "the lock handed to nobody was released")
}

// A Lock call of another locker queued for the key came before the
// releasing locker's own waiter: Unlock does not hand the key to that
// waiter (every node answers the transfer with ErrWaitersQueued) but
// releases it to the queue's head, and the waiter gets the key after it.
func TestTransferDefersToQueuedCalls(t *testing.T) {
	rls, fakes, clients := queueLockers(t, 3, 2)
	a, b := rls[0], rls[1]
	const key = "transfer:queued"
	held, err := a.Lock(t.Context(), key)
	require.NoError(t, err)
	local := waitFor(t, t.Context(), a, key)
	before := answered(fakes[1], fakenode.AcquireFair)
	remote := startLock(t.Context(), b, key, redlock.WithFairness(true))
	testwait.Until(t, "the other locker's call is queued", func() bool { return answered(fakes[1], fakenode.AcquireFair) >= before+3 })

	require.NoError(t, held.Unlock(t.Context()))
	r := <-remote
	require.NoError(t, r.err, "the queued call got the key")
	assert.Equal(t, 3, calls(fakes[0], fakenode.Transfer), "a transfer was tried on every node")
	select {
	case l := <-local:
		t.Fatalf("the releasing locker's waiter got the key (%v) while the queued call held it", l.err)
	default:
	}
	require.NoError(t, r.l.Unlock(t.Context()))
	l := <-local
	require.NoError(t, l.err, "the waiter got the key next")
	require.NoError(t, l.l.Unlock(t.Context()))
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
	assert.True(t, free(t, fakes[0], key))
}

// A queue that exists on a minority of the nodes (a call queued there as
// the transfer ran) does not stop the transfer, but the key still holds
// the old token there: Unlock releases it to that queue's head, rather
// than leave the node blocked until the old token's TTL runs out.
func TestTransferReleasesToAMinorityQueue(t *testing.T) {
	rls, fakes, clients := queueLockers(t, 3, 1)
	rl, ns := rls[0], fakes[0]
	const key, ticket, grant = "transfer:minority", "elsewhere.1", "tok-of-the-queued-call"
	held, err := rl.Lock(t.Context(), key)
	require.NoError(t, err)
	got := waitFor(t, t.Context(), rl, key)
	// An entry on node 0 alone, as acquire_fair.lua leaves it.
	queue, expiries, grants := redlock.QueueKeys(key)
	ctx := t.Context()
	require.NoError(t, clients[0].ZAdd(ctx, queue, redis.Z{Score: 1, Member: ticket}).Err())
	require.NoError(t, clients[0].ZAdd(ctx, expiries, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: ticket}).Err())
	require.NoError(t, clients[0].HSet(ctx, grants, ticket, "60000 1 "+grant).Err())

	require.NoError(t, held.Unlock(ctx))
	r := <-got
	require.NoError(t, r.err, "transferred on the other two nodes")
	v, err := clients[0].Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, grant, v, "node 0 granted the key to its queue's head, not left it to the old token")
	for _, c := range clients[1:] {
		v, err := c.Get(ctx, key).Result()
		require.NoError(t, err)
		assert.Equal(t, r.l.Token(), v)
	}
	require.NoError(t, r.l.Unlock(ctx))
	assert.Positive(t, calls(ns, fakenode.Transfer))
}

// Goroutines of one locker taking turns: never two holders, every
// hand-off transfers or releases, and after handoffChain transfers in a
// row a release gives other lockers their chance.
func TestTransferTakesTurns(t *testing.T) {
	rl, ns := transferNodes(t, 3, redlock.WithStrategy(redlock.Retry(1000, 2*time.Millisecond)))
	takeTurns(t, 4, 25, 1, lockOf(rl, "transfer:turns"), nil)
	transfers := calls(ns, fakenode.Transfer) / 3
	assert.Positive(t, transfers, "hand-offs transferred")
	assert.Positive(t, calls(ns, fakenode.Release), "the chain of transfers is bounded")
	assert.Zero(t, calls(ns, fakenode.AcquireFair), "no call took its own locker's lock for another's and joined the queue")
	assert.True(t, free(t, ns, "transfer:turns"))
}

// takeTurns runs workers goroutines that each take a lock with acquire
// rounds times, call held (if set) with their number, hold it a
// millisecond and Unlock; it fails the test on an error or more than
// holders holding at once.
func takeTurns(t *testing.T, workers, rounds, holders int, acquire func(context.Context) (*redlock.Lock, error), held func(w int)) {
	t.Helper()
	var inside atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				l, err := acquire(t.Context())
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) > int32(holders) {
					errs <- fmt.Errorf("more than %d holders at once", holders)
				}
				if held != nil {
					held(w)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(t.Context()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// lockOf returns rl's Lock of key as takeTurns's acquire.
func lockOf(rl *redlock.Redlock, key string) func(context.Context) (*redlock.Lock, error) {
	return func(ctx context.Context) (*redlock.Lock, error) { return rl.Lock(ctx, key) }
}

// Goroutines of one locker whose Unlock releases (fenced locks are not
// transferred) still take turns in the order they stand in line: while
// the release's announcement wakes the first waiter, which then asks the
// gate and the other nodes, the others leave their 2 ms timers' attempts
// out (lines.yield) instead of taking the free key ahead of it.
func TestReleaseKeepsTheLineInOrder(t *testing.T) {
	rl, ns := transferNodes(t, 3, redlock.WithFencing(), redlock.WithStrategy(redlock.Retry(1000, 2*time.Millisecond)))
	const workers, rounds = 4, 15
	var mu sync.Mutex
	var order []int
	takeTurns(t, workers, rounds, 1, lockOf(rl, "line:order"), func(w int) {
		mu.Lock()
		order = append(order, w)
		mu.Unlock()
	})
	assert.Zero(t, calls(ns, fakenode.Transfer), "fenced locks are released, not transferred")
	// Once all four stand in line, and until the first of them is done,
	// each acquisition is by the worker that acquired four before it.
	var outOfTurn int
	count := make([]int, workers)
	for i, w := range order {
		if count[w]++; count[w] == rounds {
			break
		}
		if i >= 2*workers && w != order[i-workers] {
			outOfTurn++
		}
	}
	assert.Zero(t, outOfTurn, "acquisitions out of turn, in order %v", order)
}

// A Lock call whose subscription answers late keeps its place in its
// locker's line: a later call, subscribed sooner, waits behind it, and a
// release made while the first still subscribes goes to the first (its
// attempt once subscribed finds the key free). Before, a waiter joined
// the line once subscribed, and under load a later call passed an
// earlier one (TestReleaseKeepsTheLineInOrder, about one run in 60).
func TestSlowSubscriptionKeepsItsPlaceInLine(t *testing.T) {
	const key = "line:slow"
	rl, slow, holder := heldBehindSlowSubscriptions(t, key, nil, redlock.Retry(5, time.Second))
	first := slow.startHeldBack(t.Context(), rl, key)
	assert.Equal(t, 1, redlock.Joined(rl, key), "in line while it subscribes")
	assert.Zero(t, redlock.InLine(rl, key), "not yet hearing releases")
	second := waitFor(t, t.Context(), rl, key)
	require.Equal(t, 2, redlock.Joined(rl, key), "both in line, the later behind")

	require.NoError(t, holder.Unlock(t.Context())) // released while the first still subscribes
	close(slow.open)
	var got lockResult
	select {
	case got = <-first:
	case got = <-second:
		t.Fatal("the later call took the key ahead of the earlier one")
	}
	require.NoError(t, got.err)
	require.NoError(t, got.l.Unlock(t.Context()))
	got = <-second
	require.NoError(t, got.err)
	require.NoError(t, got.l.Unlock(t.Context()))
}

// A waiter whose subscription fails leaves its line, and may have stood
// first in it while a release went unheard: the next in line, which
// heard the release but was not first, is woken. Here its only backoff
// delay is an hour, so only that wake-up lets it take the key.
func TestFailedSubscriptionPassesTheWakeUpOn(t *testing.T) {
	const key = "line:unsubscribed"
	rl, slow, holder := heldBehindSlowSubscriptions(t, key, errors.New("subscription refused"), redlock.Retry(10, time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	first := slow.startHeldBack(ctx, rl, key) // first in line
	second := waitFor(t, t.Context(), rl, key)
	require.NoError(t, holder.Unlock(t.Context())) // heard by the second only
	close(slow.open)                               // the first's subscription fails

	var got lockResult
	select {
	case got = <-second:
	case <-time.After(testwait.Watchdog):
		t.Fatal("the waiter behind the one that left was not woken")
	}
	require.NoError(t, got.err)
	require.NoError(t, got.l.Unlock(t.Context()))
	cancel()
	assert.ErrorIs(t, (<-first).err, context.Canceled)
}

// heldBehindSlowSubscriptions returns a locker over one node, with
// strategy, whose subscriptions slow can hold back (failing with fail,
// if set), and a lock of key it holds. Its TTL and node timeout leave the
// test all the time it needs while a subscription is held back.
func heldBehindSlowSubscriptions(t *testing.T, key string, fail error, strategy redlock.Strategy) (*redlock.Redlock, slowSubscriber, *redlock.Lock) {
	t.Helper()
	_, bs := minis(t, 1)
	slow := slowSubscriber{Node: bs[0], hold: new(atomic.Bool), entered: make(chan struct{}, 1), open: make(chan struct{}), fail: fail}
	rl, err := redlock.New([]driver.Node{slow}, redlock.WithTTL(30*time.Second), redlock.WithNodeTimeout(10*time.Second),
		redlock.WithStrategy(strategy))
	require.NoError(t, err)
	holder, err := rl.Lock(t.Context(), key)
	require.NoError(t, err)
	return rl, slow, holder
}

// startHeldBack starts a Lock of key on rl and returns once its
// subscription is held back (until open is closed); later ones are not.
func (n slowSubscriber) startHeldBack(ctx context.Context, rl *redlock.Redlock, key string) <-chan lockResult {
	n.hold.Store(true)
	ch := startLock(ctx, rl, key)
	<-n.entered
	n.hold.Store(false)
	return ch
}

// slowSubscriber holds back each subscription made while hold is set
// until open is closed, and tells entered when one is held back; a held
// subscription then fails with fail, if set.
type slowSubscriber struct {
	driver.Node
	hold    *atomic.Bool
	entered chan struct{}
	open    chan struct{}
	fail    error
}

func (n slowSubscriber) Subscribe(ctx context.Context, deliver func(string), channels ...string) (func(), error) {
	if n.hold.Load() {
		n.entered <- struct{}{}
		select {
		case <-n.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if n.fail != nil {
			return nil, n.fail
		}
	}
	return n.Node.(driver.Subscriber).Subscribe(ctx, deliver, channels...)
}

// Goroutines of one locker taking turns while each node, at random, loses
// replies (the command ran), fails calls (it did not run) or delivers
// them late (after the caller gave up): transfers that fall short, land
// late or are undone must never let two holders in at once.
func TestTransferUnderFaults(t *testing.T) {
	rl, ns := transferNodes(t, 3, redlock.WithTTL(300*time.Millisecond), redlock.WithNodeTimeout(30*time.Millisecond),
		redlock.WithStrategy(redlock.Retry(100, 5*time.Millisecond)))
	late := injectFaults(t, ns...)
	defer late.Wait()
	chk := exclusion.New()
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() { holdUntil(t, rl, "transfer:faults", fmt.Sprintf("g%d", g), stop, chk) })
	}
	wg.Wait()
	assert.Empty(t, chk.Overlaps())
	assert.Positive(t, calls(ns, fakenode.Transfer), "hand-offs transferred")
	t.Log(len(chk.Sections()), "sections,", calls(ns, fakenode.Transfer)/3, "transfer rounds")
}
