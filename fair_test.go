package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fairLockers starts n redis-servers and returns k Redlocks over them,
// each over fake nodes of its own (k lockers stand for k processes), with
// WithFairness, plus the fakes (per locker) and plain clients.
func fairLockers(t *testing.T, n, k int, opts ...redlock.Option) ([]*redlock.Redlock, [][]*fakenode.Node, []*redis.Client) {
	t.Helper()
	return queueLockers(t, n, k, append([]redlock.Option{redlock.WithFairness(true)}, opts...)...)
}

// queueLockers is fairLockers without WithFairness: the lockers' calls
// join the queues only once contended (fair once contended, fair.go).
func queueLockers(t *testing.T, n, k int, opts ...redlock.Option) ([]*redlock.Redlock, [][]*fakenode.Node, []*redis.Client) {
	t.Helper()
	c := redistest.Start(t, n)
	clients := make([]*redis.Client, n)
	for i, addr := range c.Addrs() {
		clients[i] = redistest.Client(t, addr)
	}
	opts = append([]redlock.Option{redlock.WithTTL(5 * time.Second), redlock.WithStrategy(redlock.Retry(5, time.Second))}, opts...)
	rls := make([]*redlock.Redlock, k)
	fakes := make([][]*fakenode.Node, k)
	for j := range k {
		bs := make([]driver.Node, n)
		for i, cl := range clients {
			bs[i] = node(t, cl)
		}
		wrapped, ns := fakenode.WrapAll(bs)
		rl, err := redlock.New(wrapped, opts...)
		require.NoError(t, err)
		rls[j], fakes[j] = rl, ns
	}
	return rls, fakes, clients
}

// queued starts a Lock of key on rl and returns once its first attempt
// was answered by every node (so it is queued there).
func queued(t *testing.T, ctx context.Context, rl *redlock.Redlock, ns []*fakenode.Node, key string) <-chan lockResult {
	t.Helper()
	before := answered(ns, fakenode.AcquireFair)
	ch := startLock(ctx, rl, key)
	// Answered, not only sent: an attempt still on its way could reach a
	// node after the holder's release there, and take the key.
	testwait.Until(t, "the waiter is queued on every node", func() bool { return answered(ns, fakenode.AcquireFair) >= before+len(ns) })
	return ch
}

func queueLen(t *testing.T, clients []*redis.Client, key string) int64 {
	t.Helper()
	var n int64
	for _, c := range clients {
		q, _, _ := redlock.QueueKeys(key)
		v, err := c.ZCard(t.Context(), q).Result()
		require.NoError(t, err)
		n += v
	}
	return n
}

// Waiters of different lockers (processes) take a released key in the
// order their Lock calls started, not by who wakes first: the releasing
// locker's own later waiter comes after the other locker's earlier one.
func TestFairOrderAcrossLockers(t *testing.T) {
	rls, fakes, clients := fairLockers(t, 3, 2)
	a, b := rls[0], rls[1]
	const key = "fair:order"
	held, err := a.Lock(t.Context(), key)
	require.NoError(t, err)
	first := queued(t, t.Context(), b, fakes[1], key)
	second := queued(t, t.Context(), a, fakes[0], key)
	third := queued(t, t.Context(), b, fakes[1], key)

	require.NoError(t, held.Unlock(t.Context()))
	for i, ch := range []<-chan lockResult{first, second, third} {
		r := <-ch
		require.NoError(t, r.err, "waiter %d", i+1)
		for j, other := range []<-chan lockResult{first, second, third}[i+1:] {
			select {
			case r2 := <-other:
				t.Fatalf("waiter %d got %v while waiter %d held the key", i+j+2, r2.err, i+1)
			default:
			}
		}
		require.NoError(t, r.l.Unlock(t.Context()))
	}
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
}

// Without WithFairness, a Lock call that finds the key held by another
// locker joins the queues (fair once contended): waiters of different
// lockers take the key in the order they were refused, and the releasing
// locker's next call, refused by the grant its release made to the head,
// queues behind them instead of taking the key straight back, as a plain
// SET NX racing the woken waiter would, more often than not. (The first
// holder took the key with a plain attempt, and its release only frees
// it: a call started then could take it ahead of the queue, fair.go;
// the queue is asked for from the first fair holder's release on.)
func TestContendedCallsQueueWithoutWithFairness(t *testing.T) {
	rls, fakes, clients := queueLockers(t, 3, 3)
	const key = "fair:contended"
	for round := range 5 {
		held, err := rls[0].Lock(t.Context(), key)
		require.NoError(t, err)
		first := queued(t, t.Context(), rls[1], fakes[1], key)
		second := queued(t, t.Context(), rls[2], fakes[2], key)
		require.NoError(t, held.Unlock(t.Context()))
		r := <-first
		require.NoError(t, r.err, "round %d: the queue's head", round)
		stillWaiting(t, second, "round %d: the second waiter, while the first holds the key", round)
		require.NoError(t, r.l.Unlock(t.Context()))
		again := queued(t, t.Context(), rls[1], fakes[1], key) // the releasing locker's next call
		r = <-second
		require.NoError(t, r.err, "round %d: the second waiter, granted by the first's release", round)
		stillWaiting(t, again, "round %d: the releasing locker's next call, while the second waiter holds the key", round)
		require.NoError(t, r.l.Unlock(t.Context()))
		r = <-again
		require.NoError(t, r.err, "round %d: the releasing locker's next call, last", round)
		require.NoError(t, r.l.Unlock(t.Context()))
		assert.Zero(t, queueLen(t, clients, key), "round %d: every entry left the queue", round)
	}
}

// A default call that another locker's lock refused leaves a record:
// the locker's next default call on the key queues from its first
// attempt, subscribed first, with no plain attempt before it. A call
// refused by its own locker's lock leaves none: the locker's next call
// starts plain.
func TestDefaultCallAfterOtherLockersContentionQueuesAtOnce(t *testing.T) {
	rls, fakes, clients := queueLockers(t, 3, 2)
	const key = "fair:record"
	ns := fakes[1]
	// waitFor has rls[1] wait for rls[0]'s lock, taken with a plain
	// attempt (its release frees the key and wakes the waiter, which
	// attempts), and counts the waiter's plain and fair attempts per node.
	waitFor := func(plainWant, fairWant int) {
		t.Helper()
		held, err := rls[0].Lock(t.Context(), key)
		require.NoError(t, err)
		plain, fair := calls(ns, fakenode.Acquire), calls(ns, fakenode.AcquireFair)
		ch := queued(t, t.Context(), rls[1], ns, key)
		testwait.Until(t, "the waiter's attempts before the release", func() bool {
			return answered(ns, fakenode.AcquireFair)-fair >= (fairWant-1)*len(ns)
		})
		require.NoError(t, held.Unlock(t.Context()))
		r := testwait.Next(t, ch)
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(t.Context()))
		assert.Equal(t, plainWant*len(ns), calls(ns, fakenode.Acquire)-plain, "plain attempts")
		assert.Equal(t, fairWant*len(ns), calls(ns, fakenode.AcquireFair)-fair, "fair attempts")
	}
	// Plain, refused by rls[0]'s lock: joins the queues, subscribes,
	// attempts fair; the release wakes it to one more.
	waitFor(1, 2)
	// Subscribed first: one fair attempt, and the woken one.
	waitFor(0, 2)
	waitFor(0, 2)
	assert.True(t, redlock.Contended(rls[1], key), "the last call was refused by rls[0]'s lock")

	// Refused by its own locker's lock: the call stays plain (it stands
	// in the locker's line), and leaves no record.
	held, err := rls[1].Lock(t.Context(), key) // takes the record: queues at once, finds the key free
	require.NoError(t, err)
	assert.False(t, redlock.Contended(rls[1], key), "taken by that call, which did not wait")
	ch := startLock(t.Context(), rls[1], key)
	testwait.Until(t, "the second call waits in line", func() bool { return redlock.Waiting(rls[1], key) })
	require.NoError(t, held.Unlock(t.Context()))
	r := testwait.Next(t, ch)
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.False(t, redlock.Contended(rls[1], key), "no record of a refusal by the locker's own lock")
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
}

// stillWaiting fails the test if the Lock call behind ch has returned.
func stillWaiting(t *testing.T, ch <-chan lockResult, format string, args ...any) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("returned (%v), should still wait: "+format, append([]any{r.err}, args...)...)
	default:
	}
}

// A refused call stays a plain one, never sending a fair attempt, with
// WithFairness(false), with WithFencing (a fenced call queues only with
// WithFairness(true)), with hand-off off, and with a strategy that does not wait; without
// any of them it joins the queues (the control).
func TestCallsThatDoNotJoinTheQueue(t *testing.T) {
	rls, fakes, clients := queueLockers(t, 3, 2)
	const key = "fair:plain"
	held, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err)
	short := redlock.WithStrategy(redlock.Retry(2, 10*time.Millisecond))
	for _, c := range []struct {
		name  string
		opts  []redlock.Option
		joins bool
	}{
		{"default", []redlock.Option{short}, true},
		{"WithoutFairness", []redlock.Option{short, redlock.WithFairness(false)}, false},
		{"WithFairness then WithoutFairness", []redlock.Option{short, redlock.WithFairness(true), redlock.WithFairness(false)}, false},
		{"WithFencing", []redlock.Option{short, redlock.WithFencing()}, false},
		{"WithHandoff(false)", []redlock.Option{short, redlock.WithHandoff(false)}, false},
		{"Reject", []redlock.Option{redlock.WithStrategy(redlock.Reject())}, false},
	} {
		before := calls(fakes[1], fakenode.AcquireFair)
		_, err := rls[1].Lock(t.Context(), key, c.opts...)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, c.name)
		assert.Equal(t, c.joins, calls(fakes[1], fakenode.AcquireFair) > before, "%s: fair attempts sent", c.name)
	}
	assert.Zero(t, queueLen(t, clients, key), "the call that joined left the queue when it gave up")
	require.NoError(t, held.Unlock(t.Context()))
}

// A release grants the key to the queue's head, in the release's own
// round: the head's Lock call takes the lock without a round of its own,
// valid from before its last attempt (which the grant came after), and
// nobody else can take the key meanwhile.
func TestFairReleaseGrantsTheHead(t *testing.T) {
	rls, fakes, clients := fairLockers(t, 3, 3)
	const key = "fair:grant"
	held, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err)
	ch := queued(t, t.Context(), rls[1], fakes[1], key)
	// Queued, then subscribed and queued again (the attempt right after
	// subscribing): from then on only a release wakes it (Retry delays
	// of a second).
	testwait.Until(t, "the waiter subscribed and attempted again", func() bool { return calls(fakes[1], fakenode.AcquireFair) >= 2*len(clients) })
	attempts, attempted := calls(fakes[1], fakenode.AcquireFair), time.Now()
	// Longer than the TTL's drift allowance: a validity counted from the
	// release would end later than attempted + TTL.
	time.Sleep(300 * time.Millisecond)

	require.NoError(t, held.Unlock(t.Context()))
	r := <-ch
	require.NoError(t, r.err)
	assert.Equal(t, attempts, calls(fakes[1], fakenode.AcquireFair), "the head took the granted lock without an attempt")
	assert.True(t, r.l.Until().Before(attempted.Add(5*time.Second)), "valid from before the head's last attempt, not from the release")
	_, err = rls[2].Lock(t.Context(), key, redlock.WithStrategy(redlock.Reject()))
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "the granted key is held")
	for _, c := range clients {
		v, err := c.Get(t.Context(), key).Result()
		require.NoError(t, err)
		assert.Equal(t, r.l.Token(), v, "every node holds the head's token")
	}
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
	l, err := rls[2].Lock(t.Context(), key, redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err, "the last release left the key free")
	require.NoError(t, l.Unlock(t.Context()))
}

// An attempt that reaches a node late, after a later attempt of the same
// call was granted the key there by a release and claimed, leaves the key
// alone: it must not take the grant over with its own token (its
// rollback, or nobody, would then hold what the claimed lock counts on).
func TestFairLateAttemptLeavesAClaimedGrant(t *testing.T) {
	rls, fakes, clients := fairLockers(t, 3, 2)
	const key = "fair:late"
	held, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err)

	deliver, delivered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fakes[1][0].SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		if c.Op != fakenode.AcquireFair {
			return c.Send(ctx)
		}
		late := false
		once.Do(func() { late = true })
		if !late {
			return c.Send(ctx)
		}
		go func() { // the first attempt reaches node 0 only when told
			<-deliver
			c.Send(context.Background())
			close(delivered)
		}()
		return fakenode.Result{Err: fakenode.ErrInjected}
	})
	ch := startLock(t.Context(), rls[1], key)
	// The first attempt (lost on node 0), then the one after subscribing,
	// which must have run on every node before the release: a release
	// that reached node 0 first would leave it free for that attempt,
	// whose round (one node of three) would be rolled back there, and the
	// late first attempt would then find node 0 free (a stray key, as
	// README's table of network faults says, not what is checked here).
	testwait.Until(t, "every node registered the second attempt", func() bool {
		_, _, grants := redlock.QueueKeys(key)
		for _, c := range clients {
			g, err := c.HGetAll(t.Context(), grants).Result()
			if err != nil || len(g) != 2 { // the holder's entry and the waiter's
				return false
			}
			registered := false
			for ticket, v := range g {
				if f := strings.Fields(v); !strings.HasPrefix(ticket, redlock.LockerID(rls[0])) && len(f) == 3 && f[1] == "2" {
					registered = true
				}
			}
			if !registered {
				return false
			}
		}
		return true
	})
	require.NoError(t, held.Unlock(t.Context())) // grants the head: the waiter's second attempt's token
	r := <-ch
	require.NoError(t, r.err)
	close(deliver)
	<-delivered
	for i, c := range clients {
		v, err := c.Get(t.Context(), key).Result()
		require.NoError(t, err)
		assert.Equal(t, r.l.Token(), v, "node %d holds the claimed lock's token", i)
	}
	require.NoError(t, r.l.Unlock(t.Context()))
}

// Every key of a queue gets an expiry, also one that a queue written by
// an older version lacked (here: the grants, deleted by hand under a
// queue that lives longer than the new entry's stay).
func TestFairQueueKeysExpire(t *testing.T) {
	_, fakes, clients := fairLockers(t, 1, 1)
	const key = "fair:expire"
	fq, c := fakes[0][0], clients[0]
	_, _, err := redlock.On(fq).AcquireFair(t.Context(), key, "tok-a", 5*time.Second, "a", 1, 5*time.Second, 1)
	require.NoError(t, err)
	q, exp, grants := redlock.QueueKeys(key)
	require.NoError(t, c.Del(t.Context(), grants).Err())
	_, _, err = redlock.On(fq).AcquireFair(t.Context(), key, "tok-b", 5*time.Second, "b", 2, 100*time.Millisecond, 1)
	require.NoError(t, err)
	for _, k := range []string{q, exp, grants} {
		ttl, err := c.PTTL(t.Context(), k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "%s expires", k)
	}
}

// A waiter two places or more behind in the queue lets its backoff
// delays pass without attempts while its entry lives on (a release will
// grant it the key and announce it), then takes the key by that grant;
// the waiter next in line keeps attempting.
func TestFairWaiterBehindWaitsForItsGrant(t *testing.T) {
	rls, fakes, clients := fairLockers(t, 3, 3, redlock.WithStrategy(redlock.Retry(20, 10*time.Millisecond)))
	const key = "fair:behind"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a waiter never granted fails instead of hanging
	defer cancel()
	held, err := rls[0].Lock(t.Context(), key) // the holder's entry stays queued until its release
	require.NoError(t, err)
	next := queued(t, ctx, rls[1], fakes[1], key)
	behind := queued(t, ctx, rls[2], fakes[2], key)
	testwait.Until(t, "the waiter behind subscribed and attempted again", func() bool { return calls(fakes[2], fakenode.AcquireFair) >= 2*len(clients) })
	nextBefore, behindBefore := calls(fakes[1], fakenode.AcquireFair), calls(fakes[2], fakenode.AcquireFair)
	time.Sleep(200 * time.Millisecond) // delays of 10, 20, 40, 80 ms run out meanwhile
	assert.Greater(t, calls(fakes[1], fakenode.AcquireFair), nextBefore, "the waiter next in line attempts when its delays run out")
	assert.Equal(t, behindBefore, calls(fakes[2], fakenode.AcquireFair), "the waiter behind makes no attempt")

	require.NoError(t, held.Unlock(t.Context()))
	r := <-next
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(t.Context()))
	r = <-behind
	require.NoError(t, r.err, "the waiter behind took the key it was granted")
	assert.Equal(t, behindBefore, calls(fakes[2], fakenode.AcquireFair), "by the grant, without an attempt")
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
}

// A fair call of a locker that found the key taken lately subscribes
// before its first attempt: that attempt queues it and is the one a
// release grants, so the call takes the granted key with one attempt
// per node, where a call that attempts first makes a second one once
// subscribed.
func TestFairContendedCallSubscribesFirst(t *testing.T) {
	// A first delay of a second: every attempt counted below is made at
	// once or after a grant, none by a delay running out.
	rls, fakes, clients := fairLockers(t, 3, 2, redlock.WithStrategy(redlock.Retry(5, time.Second)))
	const key = "fair:first"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	take := func(want int) {
		t.Helper()
		held, err := rls[0].Lock(t.Context(), key)
		require.NoError(t, err)
		before := calls(fakes[1], fakenode.AcquireFair)
		waiting := queued(t, ctx, rls[1], fakes[1], key)
		require.NoError(t, held.Unlock(t.Context()))
		r := <-waiting
		require.NoError(t, r.err)
		assert.Equal(t, want*len(clients), calls(fakes[1], fakenode.AcquireFair)-before, "attempts per node")
		require.NoError(t, r.l.Unlock(t.Context()))
	}
	take(2) // the locker's first call: attempts, subscribes, attempts again
	take(1) // the key was contended: subscribed first, one attempt
	take(1)
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
	assert.True(t, redlock.Contended(rls[1], key), "the last call found the key taken")
	assert.False(t, redlock.Contended(rls[0], key), "the holder never waited")
}

// A fair call's first attempt is made even while another call of its
// locker holds the key: that attempt queues it on the nodes. Subscribed
// first, the call is in its locker's line when it attempts, where the
// line may know the key held by a plain call of the same locker (a
// locker whose calls choose WithFairness one by one), which would skip
// any other attempt (heldHere).
func TestFairFirstAttemptQueuesWhileHeldHere(t *testing.T) {
	rls, _, clients := fairLockers(t, 3, 1)
	bs := make([]driver.Node, len(clients))
	for i, cl := range clients {
		bs[i] = node(t, cl)
	}
	wrapped, ns := fakenode.WrapAll(bs)
	mixed, err := redlock.New(wrapped, redlock.WithTTL(5*time.Second), redlock.WithStrategy(redlock.Retry(5, time.Second)))
	require.NoError(t, err)
	const key = "fair:heldhere"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lock := func(opts ...redlock.Option) <-chan lockResult { return startLock(ctx, mixed, key, opts...) }
	held, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err)
	before := answered(ns, fakenode.AcquireFair)
	first := lock(redlock.WithFairness(true))
	testwait.Until(t, "the fair call is queued", func() bool { return answered(ns, fakenode.AcquireFair) >= before+len(ns) })
	require.NoError(t, held.Unlock(t.Context()))
	r := <-first
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(t.Context()))
	require.True(t, redlock.Contended(mixed, key), "the fair call found the key taken")

	held, err = rls[0].Lock(t.Context(), key)
	require.NoError(t, err)
	plain1 := lock(redlock.WithFairness(false))
	testwait.Until(t, "the plain call waits in line", func() bool { return redlock.Waiting(mixed, key) })
	plain2 := lock(redlock.WithFairness(false))
	require.NoError(t, held.Unlock(t.Context()))
	r1 := <-plain1 // plain2 still in line, which records r1's lock as held
	require.NoError(t, r1.err)
	before = answered(ns, fakenode.AcquireFair)
	fair := lock(redlock.WithFairness(true)) // subscribes first, joins the line where r1 holds
	testwait.Until(t, "the fair call is queued at once", func() bool { return answered(ns, fakenode.AcquireFair) >= before+len(ns) })
	require.NoError(t, r1.l.Unlock(t.Context())) // not handed to plain2: the queued call came first
	for _, ch := range []<-chan lockResult{fair, plain2} {
		r := <-ch
		require.NoError(t, r.err)
		require.NoError(t, r.l.Unlock(t.Context()))
	}
}

// A waiter behind others keeps its entry alive while it waits longer than
// an entry's stay: it skips attempts only while its entry outlives the
// next delay, so a later Lock call never overtakes it.
func TestFairWaiterBehindKeepsItsPlace(t *testing.T) {
	opts := []redlock.Option{redlock.WithStrategy(redlock.Retry(30, 5*time.Millisecond)), redlock.WithNodeTimeout(20 * time.Millisecond)}
	rls, fakes, clients := fairLockers(t, 3, 5, opts...)
	const key = "fair:place"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	held, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err)
	waiters := []<-chan lockResult{
		queued(t, ctx, rls[1], fakes[1], key),
		queued(t, ctx, rls[2], fakes[2], key),
		queued(t, ctx, rls[3], fakes[3], key),
	}
	// Entries stay a few delays plus 50 ms unless refreshed (the
	// holder's, refreshed by nobody, expires).
	time.Sleep(500 * time.Millisecond)
	assert.GreaterOrEqual(t, queueLen(t, clients, key), int64(3*len(clients)), "the waiters' entries are still queued")
	waiters = append(waiters, queued(t, ctx, rls[4], fakes[4], key))

	require.NoError(t, held.Unlock(t.Context()))
	for i, ch := range waiters {
		r := <-ch
		require.NoError(t, r.err, "waiter %d", i+1)
		require.NoError(t, r.l.Unlock(t.Context()))
	}
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
}

// waiterBehind starts a Lock of key on a fair locker with a manual clock,
// after "a", which holds the key, and "b", which waits, entered the
// queue on every node: two entries ahead of it. It returns once the call
// has attempted, subscribed, attempted again (two attempts per node) and
// waits out its first delay, the clock's first timer. The locker's
// delays are 10, 20, 40 … 1280 ms; its node timeout is 1 s (a tenth of
// the TTL), so an attempt during delay n keeps its entry 2·delay(n) +
// 2 s + fairMargin, and the waiter may let delays pass while the next
// attempt still comes a node timeout and fairMargin before that
// (waitsForGrant).
func waiterBehind(t *testing.T, key string) (<-chan lockResult, []*fakenode.Node, []*redis.Client, *manualClock) {
	t.Helper()
	clock := newManualClock()
	rls, fakes, clients := fairLockers(t, 3, 1, redlock.WithClock(clock), redlock.WithTTL(10*time.Second),
		redlock.WithStrategy(redlock.Retry(8, 10*time.Millisecond)))
	for _, c := range clients {
		fq := redlock.On(node(t, c))
		for i, ticket := range []string{"a", "b"} {
			_, _, err := fq.AcquireFair(t.Context(), key, "tok-"+ticket, time.Minute, ticket, int64(i+1), time.Minute, 1)
			require.NoError(t, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a call never granted fails instead of hanging
	t.Cleanup(cancel)
	ch := startLock(ctx, rls[0], key)
	ns := fakes[0]
	testwait.Until(t, "two attempts, and the first delay", func() bool {
		return answered(ns, fakenode.AcquireFair) == 2*len(ns) && len(clock.Delays()) == 1
	})
	return ch, ns, clients, clock
}

// A waiter far back waits for the delays it lets pass on one timer, not
// one per delay, and makes the attempts it would make with one timer a
// delay: when its entry needs refreshing, when the last delay ends, and
// ErrTimeout then, at the same moment.
func TestFairWaiterBehindSleepsOnOneTimer(t *testing.T) {
	const key = "fair:stretch"
	ch, ns, _, clock := waiterBehind(t, key)
	const ms = time.Millisecond
	attempts := func(n int) func() bool {
		return func() bool { return answered(ns, fakenode.AcquireFair) == n*len(ns) }
	}
	// The attempt during the first delay keeps the entry until 2030 ms,
	// which the attempt after the delay ending at 630 ms must refresh
	// 1010 ms ahead: the delays of 20 to 320 ms pass on one timer.
	clock.Advance(10 * ms)
	testwait.Until(t, "the next timer", func() bool { return len(clock.Delays()) == 2 })
	assert.Equal(t, 620*ms, clock.Delays()[1], "one timer for the delays of 20, 40, 80, 160 and 320 ms")
	clock.Advance(619 * ms)
	assert.Equal(t, 2*len(ns), calls(ns, fakenode.AcquireFair), "no attempt before they end")
	clock.Advance(ms)
	testwait.Until(t, "an attempt at 630 ms", attempts(3))

	// That attempt keeps the entry until 3280 ms: the delay of 640 ms
	// must end with an attempt (the next one would end at 2550 ms), and
	// so must the last.
	testwait.Until(t, "the next timer", func() bool { return len(clock.Delays()) == 3 })
	assert.Equal(t, 640*ms, clock.Delays()[2])
	clock.Advance(640 * ms)
	testwait.Until(t, "an attempt at 1270 ms", attempts(4))
	testwait.Until(t, "the last timer", func() bool { return len(clock.Delays()) == 4 })
	assert.Equal(t, 1280*ms, clock.Delays()[3])
	clock.Advance(1280 * ms)
	r := testwait.Next(t, ch)
	require.ErrorIs(t, r.err, redlock.ErrTimeout)
	assert.Equal(t, 5*len(ns), calls(ns, fakenode.AcquireFair), "an attempt when the last delay ended")
	assert.Len(t, clock.Delays(), 4, "four timers for eight delays")
}

// A wake-up during a stretch of delays ends it: the waiter attempts at
// once, and plans anew from what that attempt found. Next in line now,
// it attempts again when the delay under way ends, and on every delay
// after.
func TestFairWaiterBehindWokenPlansAnew(t *testing.T) {
	const key = "fair:replan"
	ch, ns, clients, clock := waiterBehind(t, key)
	const ms = time.Millisecond
	clock.Advance(10 * ms)
	testwait.Until(t, "the stretch's timer", func() bool { return len(clock.Delays()) == 2 })
	clock.Advance(30 * ms) // 40 ms in: the third delay (30 to 70 ms) is under way

	q, exp, grants := redlock.QueueKeys(key)
	for _, c := range clients { // "b" leaves unannounced; a release by someone else is announced
		require.NoError(t, c.ZRem(t.Context(), q, "b").Err())
		require.NoError(t, c.ZRem(t.Context(), exp, "b").Err())
		require.NoError(t, c.HDel(t.Context(), grants, "b").Err())
	}
	for _, c := range clients {
		require.NoError(t, c.Publish(t.Context(), redlock.ReleaseChannel(key), "0e0e0e0e-someone-else").Err())
	}
	testwait.Until(t, "the woken attempt and the next timer", func() bool { return len(clock.Delays()) == 3 })
	assert.Equal(t, 3*len(ns), calls(ns, fakenode.AcquireFair), "one woken attempt")
	assert.Equal(t, 30*ms, clock.Delays()[2], "next in line: the delay under way ends when it would have")

	clock.Advance(30 * ms)
	testwait.Until(t, "the attempt at that delay's end", func() bool { return len(clock.Delays()) == 4 })
	assert.Equal(t, 4*len(ns), calls(ns, fakenode.AcquireFair))
	assert.Equal(t, 80*ms, clock.Delays()[3], "and the next delay on its own timer")

	for _, c := range clients { // "a" releases
		require.NoError(t, c.Del(t.Context(), key).Err())
		require.NoError(t, c.ZRem(t.Context(), q, "a").Err())
		require.NoError(t, c.ZRem(t.Context(), exp, "a").Err())
		require.NoError(t, c.HDel(t.Context(), grants, "a").Err())
	}
	clock.Advance(80 * ms)
	r := testwait.Next(t, ch)
	require.NoError(t, r.err, "the head takes the free key when its delay ends")
	assert.Equal(t, 5*len(ns), calls(ns, fakenode.AcquireFair))
	require.NoError(t, r.l.Unlock(t.Context()))
	assert.Zero(t, queueLen(t, clients, key), "every entry left the queue")
}

// A waiter that died (its entry is never refreshed nor removed) blocks a
// free key only until its entry expires.
func TestFairDeadWaiterExpires(t *testing.T) {
	rls, fakes, clients := fairLockers(t, 3, 1, redlock.WithStrategy(redlock.Retry(100, 10*time.Millisecond)))
	const key = "fair:dead"
	for _, f := range fakes[0] { // a waiter that started first, then died
		ok, ahead, err := redlock.On(f).AcquireFair(t.Context(), key, "dead-token", 5*time.Second, "dead", 1, 200*time.Millisecond, 1)
		require.NoError(t, err)
		require.True(t, ok, "the free key was granted to the first waiter, %d ahead", ahead)
		_, err = redlock.On(f).Release(t.Context(), key, "dead-token", false) // a rollback keeps the entry
		require.NoError(t, err)
	}
	before := calls(fakes[0], fakenode.AcquireFair)
	l, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err, "the dead waiter's entry expired")
	assert.Greater(t, calls(fakes[0], fakenode.AcquireFair)-before, 3, "the first round was refused: the dead entry was ahead")
	require.NoError(t, l.Unlock(t.Context()))
	// The waiter's entry left with the release. The dead one is dropped
	// by the next fair attempt on a node, once expired: it may remain,
	// expired, on a node that refused the attempt that took the key
	// (the node's clock had not yet reached its expiry).
	q, exp, _ := redlock.QueueKeys(key)
	for i, c := range clients {
		left, err := c.ZRange(t.Context(), q, 0, -1).Result()
		require.NoError(t, err)
		for _, ticket := range left {
			require.Equal(t, "dead", ticket, "node %d: only the dead waiter's entry may remain", i)
			until, err := c.ZScore(t.Context(), exp, ticket).Result()
			require.NoError(t, err)
			now, err := c.Time(t.Context()).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, int64(until), now.UnixMilli(), "node %d: the dead entry expired", i)
		}
	}
}

// A Lock call that gives up (Reject, or its context ends) leaves the
// queue on every node.
func TestFairLeavesWhenGivingUp(t *testing.T) {
	rls, fakes, clients := fairLockers(t, 3, 2)
	const key = "fair:leave"
	held, err := rls[0].Lock(t.Context(), key)
	require.NoError(t, err)
	holder := queueLen(t, clients, key) // the holder's entries stay until its release
	_, err = rls[1].Lock(t.Context(), key, redlock.WithStrategy(redlock.Reject()))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Equal(t, holder, queueLen(t, clients, key), "Reject left the queue")

	ctx, cancel := context.WithCancel(t.Context())
	ch := queued(t, ctx, rls[1], fakes[1], key)
	cancel()
	r := <-ch
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Equal(t, holder, queueLen(t, clients, key), "a cancelled waiter left the queue")
	require.NoError(t, held.Unlock(t.Context()))
	assert.Zero(t, queueLen(t, clients, key), "the holder's release left the queue")
}

// Fairness goes with fencing: calls take the key in order, each with a
// token above the one before, whether it found the key free or took it
// over from a fair release's grant.
func TestFairFencedInOrder(t *testing.T) {
	rls, _, _ := fairLockers(t, 3, 2, redlock.WithFencing(), redlock.WithTTL(5*time.Second),
		redlock.WithStrategy(redlock.Retry(1000, 5*time.Millisecond)))
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	for _, rl := range rls {
		for range 3 {
			wg.Go(func() {
				for range 3 {
					l, err := rl.Lock(t.Context(), "fair:fenced")
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					tokens = append(tokens, l.Fence())
					mu.Unlock()
					assert.NoError(t, l.Unlock(t.Context()))
				}
			})
		}
	}
	wg.Wait()
	require.Len(t, tokens, 18)
	for i := 1; i < len(tokens); i++ {
		assert.Greater(t, tokens[i], tokens[i-1], "holder %d's token", i)
	}
}

// Three lockers (processes) of two goroutines each, all fair, while each
// node at random loses replies (the command ran), fails calls (it did not
// run) or delivers them late (after the caller gave up): rounds that fall
// short, grants rolled back and entries left behind must never let two
// holders in at once.
func TestFairExclusionUnderFaults(t *testing.T) {
	rls, fakes, _ := fairLockers(t, 3, 3, redlock.WithTTL(300*time.Millisecond), redlock.WithNodeTimeout(30*time.Millisecond),
		redlock.WithStrategy(redlock.Retry(100, 5*time.Millisecond)))
	late := injectFaults(t, slices.Concat(fakes...)...)
	defer late.Wait()
	chk := exclusion.New()
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for p, rl := range rls {
		for g := range 2 {
			wg.Go(func() { holdUntil(t, rl, "fair:faults", fmt.Sprintf("p%dg%d", p, g), stop, chk) })
		}
	}
	wg.Wait()
	assert.Empty(t, chk.Overlaps())
	assert.NotEmpty(t, chk.Sections(), "some Lock calls got the key")
	t.Log(len(chk.Sections()), "sections")
}
