package redlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fencedPrimitive takes name with fencing on r and returns the token(s)
// it got and how to let go.
type fencedPrimitive struct {
	name string
	take func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func())
}

func unlocker(t *testing.T, l *redlock.Lock) func() {
	return func() { require.NoError(t, l.Unlock(context.Background())) }
}

// fencedPrimitives is every primitive that fences: the mutex, a set of
// keys, a writer and a reader, a semaphore permit (one slot, so that
// successive permits are fenced by one counter), an election's term and
// a fair lock.
var fencedPrimitives = []fencedPrimitive{
	{"mutex", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		l, err := r.Lock(t.Context(), name, redlock.WithFencing())
		require.NoError(t, err)
		return l.Fences(), unlocker(t, l)
	}},
	{"set", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		l, err := r.LockMany(t.Context(), []string{"{" + name + "}:a", "{" + name + "}:b"}, redlock.WithFencing())
		require.NoError(t, err)
		return l.Fences(), unlocker(t, l)
	}},
	{"writer", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		l, err := r.WLock(t.Context(), name, redlock.WithFencing())
		require.NoError(t, err)
		return l.Fences(), unlocker(t, l)
	}},
	{"reader", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		l, err := r.RLock(t.Context(), name, redlock.WithFencing())
		require.NoError(t, err)
		return l.Fences(), unlocker(t, l)
	}},
	{"semaphore", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		sem, err := redlock.NewSemaphore(r, name, 1, redlock.WithFencing())
		require.NoError(t, err)
		l, err := sem.Acquire(t.Context())
		require.NoError(t, err)
		return l.Fences(), unlocker(t, l)
	}},
	{"election", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		e, err := redlock.NewElection(r, name)
		require.NoError(t, err)
		l, err := e.Campaign(t.Context(), "me")
		require.NoError(t, err)
		return []int64{l.Term()}, func() { require.NoError(t, l.Resign(context.Background())) }
	}},
	{"fair", func(t *testing.T, r *redlock.Redlock, name string) ([]int64, func()) {
		l, err := r.Lock(t.Context(), name, redlock.WithFencing(), redlock.WithFairness(true))
		require.NoError(t, err)
		return l.Fences(), unlocker(t, l)
	}},
}

// deleteCounters deletes every fence counter on every node, as eviction,
// a FLUSHALL or a restart without persistence would lose them.
func deleteCounters(t *testing.T, clients []*redis.Client) {
	t.Helper()
	for _, c := range clients {
		keys, err := c.Keys(t.Context(), "*:fence").Result()
		require.NoError(t, err)
		if len(keys) > 0 {
			require.NoError(t, c.Del(t.Context(), keys...).Err())
		}
	}
}

// Between two holders of a name the counters are deleted on every node:
// the second token is still greater than the first, for every primitive
// that fences, over one node and three (the nodes' clocks agree: they are
// one machine's).
func TestFenceAboveAfterCountersLost(t *testing.T) {
	for _, n := range []int{1, 3} {
		c := redistest.Start(t, n)
		clients := make([]*redis.Client, n)
		nodes := make([]driver.Node, n)
		for i, addr := range c.Addrs() {
			clients[i] = redistest.Client(t, addr)
			nodes[i] = node(t, clients[i])
		}
		r, err := redlock.New(nodes, redlock.WithTTL(5*time.Second))
		require.NoError(t, err)
		for _, p := range fencedPrimitives {
			t.Run(fmt.Sprintf("N=%d/%s", n, p.name), func(t *testing.T) {
				first, release := p.take(t, r, "lost:"+p.name)
				release()
				deleteCounters(t, clients)
				second, release := p.take(t, r, "lost:"+p.name)
				release()
				require.Len(t, second, len(first))
				for i := range first {
					assert.Greater(t, second[i], first[i], "token %d", i)
				}
			})
		}
	}
}

// One master of three is flushed between two holders and rejoins at once:
// the second token is greater than the first, for every primitive (the
// quorums share a master that kept its counter, or the flushed one starts
// from its clock).
func TestFenceAboveAfterAMasterIsFlushed(t *testing.T) {
	c := redistest.Start(t, 3)
	clients := make([]*redis.Client, 3)
	nodes := make([]driver.Node, 3)
	for i, addr := range c.Addrs() {
		clients[i] = redistest.Client(t, addr)
		nodes[i] = node(t, clients[i])
	}
	r, err := redlock.New(nodes, redlock.WithTTL(5*time.Second))
	require.NoError(t, err)
	for i, p := range fencedPrimitives {
		t.Run(p.name, func(t *testing.T) {
			first, release := p.take(t, r, "flushed:"+p.name)
			release()
			require.NoError(t, clients[i%3].FlushAll(t.Context()).Err())
			second, release := p.take(t, r, "flushed:"+p.name)
			release()
			for j := range first {
				assert.Greater(t, second[j], first[j], "token %d", j)
			}
		})
	}
}

// Every key the library writes expires. Ten primitives on many distinct
// names, half released and half left to expire; then every key on the
// nodes has an expiry, and once the TTL and the fence lifetime have
// passed, nothing is left.
func TestEveryKeyExpires(t *testing.T) {
	const (
		ttl   = 300 * time.Millisecond
		life  = time.Second
		names = 10
	)
	c := redistest.Start(t, 3)
	clients := make([]*redis.Client, 3)
	nodes := make([]driver.Node, 3)
	for i, addr := range c.Addrs() {
		clients[i] = redistest.Client(t, addr)
		nodes[i] = node(t, clients[i])
	}
	r, err := redlock.New(nodes, redlock.WithTTL(ttl), redlock.WithFenceLifetime(life), redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	ctx := t.Context()
	keep := func(l *redlock.Lock, i int) { // half released, half left to expire
		if i%2 == 0 {
			require.NoError(t, l.Unlock(ctx))
		}
	}
	for i := range names {
		name := fmt.Sprintf("expire:%d", i)
		for _, opts := range [][]redlock.Option{nil, {redlock.WithFencing()}, {redlock.WithFairness(true)}, {redlock.WithFencing(), redlock.WithFairness(true)}} {
			l, err := r.Lock(ctx, name+fmt.Sprint(len(opts)), opts...)
			require.NoError(t, err)
			keep(l, i)
		}
		l, err := r.LockMany(ctx, []string{"{" + name + "}:a", "{" + name + "}:b"}, redlock.WithFencing())
		require.NoError(t, err)
		keep(l, i)
		l, err = r.RLock(ctx, name+":rw", redlock.WithFencing())
		require.NoError(t, err)
		// A writer refused while the reader holds leaves its "writer
		// waiting" mark.
		_, err = r.WLock(ctx, name+":rw", redlock.WithFencing(), redlock.WithStrategy(redlock.Retry(1, time.Millisecond)))
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		keep(l, i)
		sem, err := redlock.NewSemaphore(r, name+":sem", 2, redlock.WithFencing())
		require.NoError(t, err)
		l, err = sem.Acquire(ctx)
		require.NoError(t, err)
		keep(l, i)
		e, err := redlock.NewElection(r, name+":election")
		require.NoError(t, err)
		lead, err := e.Campaign(ctx, "me")
		require.NoError(t, err)
		_, err = e.Leader(ctx)
		require.NoError(t, err)
		require.NoError(t, lead.Resign(ctx))
	}
	// A fair waiter queued behind a holder leaves its queue entry.
	held, err := r.Lock(ctx, "expire:queued")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := r.Lock(ctx, "expire:queued", redlock.WithFairness(true), redlock.WithStrategy(redlock.Retry(1, 50*time.Millisecond)))
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	})
	wg.Wait()

	total := 0
	for i, cl := range clients {
		keys, err := cl.Keys(ctx, "*").Result()
		require.NoError(t, err)
		total += len(keys)
		for _, k := range keys {
			pttl, err := cl.PTTL(ctx, k).Result()
			require.NoError(t, err)
			if pttl == -2 { // expired between KEYS and PTTL: it did expire
				continue
			}
			assert.GreaterOrEqual(t, pttl, time.Duration(0), "node %d: %q expires", i, k) // -1: never
			assert.LessOrEqual(t, pttl, life, "node %d: %q lives no longer than the fence lifetime", i, k)
		}
	}
	assert.Greater(t, total, 3*names, "the primitives left keys to check")
	require.NoError(t, held.Unlock(ctx))

	time.Sleep(life + ttl) // a wait for expiry, not a timing claim
	for i, cl := range clients {
		keys, err := cl.Keys(ctx, "*").Result()
		require.NoError(t, err)
		assert.Empty(t, keys, "node %d: left after the TTL and the fence lifetime", i)
	}
}

// TestRenewalKeepsTheFenceCounter: a fenced lock (one key, a set, a
// reader's share) extended past the fence lifetime keeps its counter, so
// the next token follows the counter. An unfenced lock's Extend leaves a
// counter alone (the clock floor covers one that expires meanwhile).
func TestRenewalKeepsTheFenceCounter(t *testing.T) {
	ms, nodes := minis(t, 3)
	lk, err := redlock.New(nodes, redlock.WithTTL(time.Second), redlock.WithFenceLifetime(2*time.Second),
		redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	ctx := context.Background()

	one, err := lk.Lock(ctx, "renewed:one", redlock.WithFencing())
	require.NoError(t, err)
	set, err := lk.LockMany(ctx, []string{"renewed:a", "renewed:b"}, redlock.WithFencing())
	require.NoError(t, err)
	read, err := lk.RLock(ctx, "renewed:r", redlock.WithFencing())
	require.NoError(t, err)
	for range 8 { // 4 s of node time, twice the lifetime
		for _, m := range ms {
			m.FastForward(500 * time.Millisecond)
		}
		require.NoError(t, one.Extend(ctx, time.Second))
		require.NoError(t, set.Extend(ctx, time.Second))
		require.NoError(t, read.Extend(ctx, time.Second))
	}
	for _, m := range ms {
		for _, k := range []string{"renewed:one", "renewed:a", "renewed:b", "renewed:r"} {
			assert.True(t, m.Exists(k+":fence"), "%s:fence expired under its holder", k)
			assert.Greater(t, m.TTL(k+":fence"), time.Second, "%s:fence", k)
		}
	}
	v, err := ms[0].Get("renewed:one:fence")
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(one.Fence(), 10), v)
	require.NoError(t, one.Unlock(ctx))
	next, err := lk.Lock(ctx, "renewed:one", redlock.WithFencing())
	require.NoError(t, err)
	assert.Equal(t, one.Fence()+1, next.Fence(), "the next token follows the kept counter")
	require.NoError(t, next.Unlock(ctx))
	require.NoError(t, set.Unlock(ctx))
	require.NoError(t, read.Unlock(ctx))

	plain, err := lk.Lock(ctx, "renewed:one") // not fenced
	require.NoError(t, err)
	for _, m := range ms {
		m.FastForward(500 * time.Millisecond)
	}
	require.NoError(t, plain.Extend(ctx, time.Second))
	for _, m := range ms {
		assert.LessOrEqual(t, m.TTL("renewed:one:fence"), 1500*time.Millisecond, "an unfenced Extend refreshed the counter")
		assert.Greater(t, m.TTL("renewed:one:fence"), time.Duration(0), "the counter is still there")
	}
	require.NoError(t, plain.Unlock(ctx))
}

// TestElectionRenewalKeepsTheTerm: a leadership whose lease renews past
// the fence lifetime keeps its counters, so Leader still reads its term.
func TestElectionRenewalKeepsTheTerm(t *testing.T) {
	ms, nodes := minis(t, 3)
	lk, err := redlock.New(nodes, redlock.WithTTL(time.Second), redlock.WithFenceLifetime(time.Second))
	require.NoError(t, err)
	e, err := redlock.NewElection(lk, "renewed:election")
	require.NoError(t, err)
	ctx := context.Background()
	l, err := e.Campaign(ctx, "a")
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Resign(ctx)) }()
	for range 8 { // 2 s of node time, twice the lifetime
		for _, m := range ms {
			m.FastForward(250 * time.Millisecond)
		}
		before := l.Until()
		testwait.Until(t, "a renewal of the lease", func() bool { return l.Until().After(before) })
	}
	for i, m := range ms {
		assert.True(t, m.Exists("renewed:election:fence"), "node %d: the term's counter expired under its leader", i)
	}
	got, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, l.Term(), got.Term, "the leader's term, read from the nodes")
}
