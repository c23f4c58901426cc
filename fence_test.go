package redlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fault is what a flaky node does to the calls of one acquisition.
type fault int32

const (
	healthy   fault = iota
	down            // every call fails without reaching the node
	lostReply       // acquisitions land (SET and INCR) but the reply is lost
	noRaise         // fence raises fail without reaching the node
	fakeRaise       // fence raises claim success and do nothing: the plain-maximum scheme
)

// flaky is a fake node (fencing, not notifying) whose calls suffer one
// fault at a time.
type flaky struct {
	node   *fakenode.Node
	fault  atomic.Int32
	plain  bool         // every raise claims success and does nothing
	raises atomic.Int64 // raises that reached the node
}

func (f *flaky) set(x fault)     { f.fault.Store(int32(x)) }
func (f *flaky) is(x fault) bool { return fault(f.fault.Load()) == x }

// hook injects the current fault into a call.
func (f *flaky) hook(ctx context.Context, c fakenode.Call) fakenode.Result {
	failed := fakenode.Result{Err: fakenode.ErrInjected}
	switch {
	case c.Op == fakenode.RaiseFence && f.plain && !f.is(down):
		return fakenode.Result{Reply: int64(1)}
	case f.is(down):
		return failed
	case c.Op == fakenode.RaiseFence && f.is(noRaise):
		return failed
	case c.Op == fakenode.RaiseFence && f.is(fakeRaise):
		return fakenode.Result{Reply: int64(1)}
	case c.Op == fakenode.RaiseFence:
		f.raises.Add(1)
	}
	r := c.Send(ctx)
	if c.Op == fakenode.AcquireFenced && f.is(lostReply) && r.Err == nil {
		return fakenode.Result{Err: context.DeadlineExceeded}
	}
	return r
}

func flakies(bs []driver.Node) ([]driver.Node, []*flaky) {
	out := make([]driver.Node, len(bs))
	fs := make([]*flaky, len(bs))
	for i, b := range bs {
		fs[i] = &flaky{node: fakenode.Wrap(b)}
		fs[i].node.SetHook(fs[i].hook)
		out[i] = fakenode.Silent(fs[i].node)
	}
	return out, fs
}

// setFaults gives node i faults[i]; missing entries are healthy.
func setFaults(fs []*flaky, faults ...fault) {
	for i, f := range fs {
		x := healthy
		if i < len(faults) {
			x = faults[i]
		}
		f.set(x)
	}
}

func TestFencingSingle(t *testing.T) {
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	var first int64
	for i := range int64(5) {
		l, err := s.Lock(t.Context(), "order:1")
		require.NoError(t, err)
		if i == 0 {
			first = l.Fence()
			assert.Greater(t, first, int64(1_700_000_000_000_000), "a new counter starts from the node's clock, in µs")
		}
		assert.Equal(t, first+i, l.Fence(), "then counts one up per holder")
		_, err = s.Lock(t.Context(), "order:1")
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, l.Unlock(t.Context()))
	}
	v, err := ms[0].Get("order:1:fence")
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(first+4, 10), v, "a refused attempt does not increment the counter")
	assert.Equal(t, 24*time.Hour, ms[0].TTL("order:1:fence"), "the counter lives a day after its last use")

	ms[0].Set("order:2:fence", "41") // a counter of an older version, which never expired
	l, err := s.Lock(t.Context(), "order:2")
	require.NoError(t, err)
	assert.Equal(t, int64(42), l.Fence(), "keys have their own counters; an existing one counts on")
	assert.Equal(t, 24*time.Hour, ms[0].TTL("order:2:fence"), "and expires from then on")

	plain, err := redlock.NewSingle(bs[0])
	require.NoError(t, err)
	l, err = plain.Lock(t.Context(), "order:3")
	require.NoError(t, err)
	assert.Zero(t, l.Fence(), "no token without WithFencing")
	assert.False(t, ms[0].Exists("order:3:fence"))
}

// The fence lifetime must cover the TTL: a counter must not expire under
// its holder.
func TestFenceLifetimeValidation(t *testing.T) {
	_, bs := minis(t, 1)
	_, err := redlock.NewSingle(bs[0], redlock.WithFencing(), redlock.WithTTL(time.Minute), redlock.WithFenceLifetime(time.Second))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = redlock.NewSingle(bs[0], redlock.WithFenceLifetime(0))
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	_, err = redlock.NewSingle(bs[0], redlock.WithFencing(), redlock.WithTTL(time.Second), redlock.WithFenceLifetime(time.Second))
	assert.NoError(t, err)
}

// TestFencingPlainMaximumGoesBackwards forces the interleaving that breaks
// the obvious scheme (token = maximum of the quorum's INCRs) and shows that
// the second round keeps tokens increasing through it.
func TestFencingPlainMaximumGoesBackwards(t *testing.T) {
	run := func(t *testing.T, raise bool) []int64 {
		ms, bs := minis(t, 5)
		seedCounters(t, ms, "k", 0)
		fb, fs := flakies(bs)
		r, err := redlock.New(fb, redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
		require.NoError(t, err)
		var tokens []int64
		holder := func(faults ...fault) {
			t.Helper()
			setFaults(fs, faults...)
			if !raise {
				for _, f := range fs {
					if f.is(healthy) {
						f.set(fakeRaise)
					}
				}
			}
			l, err := r.Lock(t.Context(), "k")
			require.NoError(t, err)
			tokens = append(tokens, l.Fence())
			setFaults(fs)
			require.NoError(t, l.Unlock(t.Context()))
		}
		holder() // all five nodes: counters 1 everywhere
		// Five attempts that reach only nodes 3 and 4 fail (no quorum) and
		// are rolled back, but bump those nodes' counters to 6.
		setFaults(fs, down, down, down)
		for range 5 {
			_, err := r.Lock(t.Context(), "k")
			require.ErrorIs(t, err, redlock.ErrUnavailable)
		}
		holder(down, down)                            // quorum {2,3,4}: counters 2, 7, 7: token 7
		holder(healthy, healthy, healthy, down, down) // quorum {0,1,2}
		return tokens
	}
	t.Run("plain maximum", func(t *testing.T) {
		tokens := run(t, false)
		assert.Equal(t, []int64{1, 7, 3}, tokens, "the third holder gets a smaller token than the second")
	})
	t.Run("with the raise round", func(t *testing.T) {
		tokens := run(t, true)
		assert.Equal(t, []int64{1, 7, 8}, tokens, "node 2 was raised to 7 while the second holder held it")
	})
}

func TestFencingRaiseFailureRollsBack(t *testing.T) {
	ms, bs := minis(t, 5)
	fb, fs := flakies(bs)
	r, err := redlock.New(fb, redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	seedCounters(t, ms, "k", 0)
	require.NoError(t, ms[0].Set("k:fence", "10")) // node 0 is ahead
	// Node 0 grants with 11; nodes 1 and 2 grant with 1 and cannot be
	// raised; nodes 3 and 4 are down: only one node is at 11.
	setFaults(fs, healthy, noRaise, noRaise, down, down)
	_, err = r.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrUnavailable)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Granted)
	assert.Contains(t, err.Error(), "raising the fence to 11")
	for _, m := range ms[:3] {
		assert.False(t, m.Exists("k"), "rolled back")
	}
	setFaults(fs)
	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, int64(12), l.Fence())
}

// fenceRun makes n acquisitions of one key over 5 nodes; before each, a
// random minority of nodes fails in a random way, and now and then a
// competitor whose majority is down makes failed attempts that bump a
// minority's counters. It returns the tokens in order and how many raises
// reached a node. plain turns the raise round into a no-op.
func fenceRun(t *testing.T, bs []driver.Node, n int, seed uint64, plain bool) ([]int64, int64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	fb, fs := flakies(bs)
	for _, f := range fs {
		f.plain = plain
	}
	r, err := redlock.New(fb, redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()), redlock.WithTTL(5*time.Second))
	require.NoError(t, err)
	faults := []fault{down, lostReply, noRaise}
	tokens := make([]int64, 0, n)
	for i := 0; len(tokens) < n; i++ {
		if rng.IntN(4) == 0 { // a failed attempt on a random minority
			setFaults(fs)
			perm := rng.Perm(5)
			for _, j := range perm[:3] {
				fs[j].set(down)
			}
			for range 1 + rng.IntN(3) {
				_, err := r.Lock(t.Context(), "k")
				require.ErrorIs(t, err, redlock.ErrUnavailable)
			}
		}
		setFaults(fs)
		perm := rng.Perm(5)
		for _, j := range perm[:rng.IntN(3)] { // 0, 1 or 2 nodes fail
			fs[j].set(faults[rng.IntN(len(faults))])
		}
		l, err := r.Lock(t.Context(), "k")
		require.NoError(t, err, "acquisition %d: a minority failing never stops the lock", i)
		tokens = append(tokens, l.Fence())
		setFaults(fs) // let the release reach every node, including lost replies
		require.NoError(t, l.Unlock(t.Context()))
	}
	var raises int64
	for _, f := range fs {
		raises += f.raises.Load()
	}
	return tokens, raises
}

func assertIncreasing(t *testing.T, tokens []int64) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d is %d after %d: not strictly increasing", i, tokens[i], tokens[i-1])
		}
	}
}

func TestFencingStrictlyIncreasingWithRandomMinorityFailing(t *testing.T) {
	_, bs := minis(t, 5)
	tokens, raises := fenceRun(t, bs, 1000, 1, false)
	assertIncreasing(t, tokens)
	assert.Greater(t, tokens[len(tokens)-1], int64(1000), "failed attempts consumed counter values too")
	assert.Positive(t, raises, "the counters diverged and the raise round was needed")
	t.Logf("1000 tokens up to %d, %d raises", tokens[len(tokens)-1], raises)

	// The same faults without the raise round: the plain maximum goes back.
	_, bs = minis(t, 5)
	tokens, _ = fenceRun(t, bs, 300, 1, true)
	backwards := 0
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			backwards++
		}
	}
	assert.Positive(t, backwards, "without the raise round some token is not above its predecessor")
	t.Logf("plain maximum: %d of 300 tokens not above their predecessor", backwards)
}

func TestRealServersFencingStrictlyIncreasing(t *testing.T) {
	_, bs := realNodes(t, 5)
	tokens, _ := fenceRun(t, bs, 200, 2, false)
	assertIncreasing(t, tokens)

	_, one := realNodes(t, 1)
	s, err := redlock.NewSingle(one[0], redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	var last int64
	for i := range 50 {
		l, err := s.Lock(t.Context(), "k")
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last, fmt.Sprint("acquisition ", i))
		last = l.Fence()
		require.NoError(t, l.Unlock(t.Context()))
	}
}

// TestFencingSurvivesALostCounter: a master that restarts without
// persistence, when it is the only node shared by two holders' quorums,
// starts its counter again from its clock, above the earlier holders'
// tokens; with that clock far behind (the assumption broken), the later
// holder gets a lower token.
func TestFencingSurvivesALostCounter(t *testing.T) {
	ms, bs := minis(t, 5)
	seedCounters(t, ms, "k", 0)
	fb, fs := flakies(bs)
	r, err := redlock.New(fb, redlock.WithFencing(), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	var last int64
	setFaults(fs, healthy, healthy, healthy, down, down)
	for range 5 { // holders on {0,1,2}: their counters reach 5
		l, err := r.Lock(t.Context(), "k")
		require.NoError(t, err)
		last = l.Fence()
		require.NoError(t, l.Unlock(t.Context()))
	}
	require.Equal(t, int64(5), last)

	ms[2].FlushAll() // node 2 restarts empty
	setFaults(fs, down, down)
	l, err := r.Lock(t.Context(), "k") // quorum {2,3,4}: node 2 starts from its clock, 3 and 4 at 1
	require.NoError(t, err)
	assert.Greater(t, l.Fence(), last, "the flushed node's clock is above every token")
	last = l.Fence()
	require.NoError(t, l.Unlock(t.Context()))

	// The counters of a whole quorum lost, its nodes' clocks an hour
	// behind the tokens: the assumption of docs/fencing.md broken.
	setFaults(fs, healthy, healthy, healthy, down, down)
	l, err = r.Lock(t.Context(), "k")
	require.NoError(t, err)
	last = l.Fence()
	require.NoError(t, l.Unlock(t.Context()))
	for _, m := range ms[2:] {
		m.FlushAll()
		m.SetTime(time.UnixMicro(last).Add(-time.Hour))
	}
	setFaults(fs, down, down)
	l, err = r.Lock(t.Context(), "k")
	require.NoError(t, err)
	assert.Less(t, l.Fence(), last, "with the clock behind, the token goes backwards")
	require.NoError(t, l.Unlock(t.Context()))
}

// seedCounters sets key's fence counter to v on every node, as a counter
// that has counted from 0 does.
func seedCounters(t *testing.T, ms []*miniredis.Miniredis, key string, v int) {
	t.Helper()
	for _, m := range ms {
		require.NoError(t, m.Set(key+":fence", strconv.Itoa(v)))
	}
}
