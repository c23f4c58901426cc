package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// journal records the order in which starting nodes were started and
// finished.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, fmt.Sprintf(format, args...))
}

func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.entries
	j.entries = nil
	return e
}

// startingNode is a Starter over a Backend of the go-redis client pool
// (WithClientPool, not itself a Starter): its Start runs nothing, its
// Finish makes the call; both are journaled. fail, when set, is the error
// of every Start, reported by Finish without calling the node.
type startingNode struct {
	redlock.Backend
	j    *journal
	fail error
}

type finisher struct {
	n    *startingNode
	call func() (bool, error)
}

func (f finisher) Finish() (bool, error) {
	f.n.j.add("finish %s", f.n.Name())
	if f.n.fail != nil {
		return false, f.n.fail
	}
	return f.call()
}

func (n *startingNode) start(op string, call func() (bool, error)) redlock.Pending {
	n.j.add("start %s %s", op, n.Name())
	return finisher{n, call}
}

func (n *startingNode) StartAcquire(ctx context.Context, key, token string, ttl time.Duration) redlock.Pending {
	return n.start("acquire", func() (bool, error) { return n.Acquire(ctx, key, token, ttl) })
}

func (n *startingNode) StartRelease(ctx context.Context, key, token string, announce bool) redlock.Pending {
	return n.start("release", func() (bool, error) { return n.Release(ctx, key, token, announce) })
}

func (n *startingNode) StartExtend(ctx context.Context, key, token string, ttl time.Duration) redlock.Pending {
	return n.start("extend", func() (bool, error) { return n.Extend(ctx, key, token, ttl) })
}

func startingNodes(t *testing.T, n int) ([]*startingNode, []redlock.Backend, *journal) {
	j := &journal{}
	sn := make([]*startingNode, n)
	bs := make([]redlock.Backend, n)
	for i := range sn {
		b, err := goredis.New(redistest.Client(t, miniredisAddr(t)), goredis.WithClientPool())
		require.NoError(t, err)
		sn[i] = &startingNode{Backend: b, j: j}
		bs[i] = sn[i]
	}
	return sn, bs, j
}

// startedThenFinished is the journal of a round of op over sn that starts
// every node's call, then finishes each in turn.
func startedThenFinished(sn []*startingNode, op string) []string {
	var j []string
	for _, n := range sn {
		j = append(j, "start "+op+" "+n.Name())
	}
	for _, n := range sn {
		j = append(j, "finish "+n.Name())
	}
	return j
}

// tryLock makes one attempt.
func tryLock(ctx context.Context, rl *redlock.Redlock, key string) (*redlock.Lock, error) {
	return rl.Lock(ctx, key, redlock.WithStrategy(redlock.Reject()))
}

func miniredisAddr(t *testing.T) string {
	ms, _ := minis(t, 1)
	return ms[0].Addr()
}

// TestRoundsOverStartersStartEveryNodeFirst: over nodes that are all
// Starters, acquire, extend and release rounds start every node's call,
// then finish each in turn, and answer as the calls would.
func TestRoundsOverStartersStartEveryNodeFirst(t *testing.T) {
	sn, bs, j := startingNodes(t, 3)
	rl, err := redlock.New(bs)
	require.NoError(t, err)
	ctx := t.Context()
	l, err := tryLock(ctx, rl, "k")
	require.NoError(t, err)
	want := func(op string) []string { return startedThenFinished(sn, op) }
	assert.Equal(t, want("acquire"), j.take())
	require.NoError(t, l.Extend(ctx, time.Minute))
	assert.Equal(t, want("extend"), j.take())
	_, err = tryLock(ctx, rl, "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "the key is held")
	j.take()
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, want("release"), j.take())
}

// transferStartingNode is a startingNode that also notifies releases
// and transfers, starting its transfers (redlock.TransferStarter).
type transferStartingNode struct{ *startingNode }

func (n transferStartingNode) Notify(ctx context.Context, key string, released func(string)) (func(), error) {
	return n.Backend.(redlock.Notifier).Notify(ctx, key, released)
}

func (n transferStartingNode) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	return n.Backend.(redlock.Transferrer).Transfer(ctx, key, oldToken, newToken, ttl)
}

func (n transferStartingNode) StartTransfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) redlock.Pending {
	return n.start("transfer", func() (bool, error) { return n.Transfer(ctx, key, oldToken, newToken, ttl) })
}

// TestTransferRoundOverTransferStartersStartsEveryNodeFirst: over nodes
// that are all TransferStarters, Unlock's transfer round to a waiter
// starts every node's transfer, then finishes each in turn.
func TestTransferRoundOverTransferStartersStartsEveryNodeFirst(t *testing.T) {
	sn, _, j := startingNodes(t, 3)
	bs := make([]redlock.Backend, len(sn))
	for i, n := range sn {
		bs[i] = transferStartingNode{n}
	}
	rl, err := redlock.New(bs, redlock.WithStrategy(redlock.Retry(5, time.Second)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	l, err := tryLock(ctx, rl, "k")
	require.NoError(t, err)
	got := startLock(ctx, rl, "k")
	// Its first attempt, and the one once subscribed and in line: six
	// journal entries each.
	testwait.Until(t, "the waiter's two attempts", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return len(j.entries) == 12+6 // and the first Lock's
	})
	require.Equal(t, 1, redlock.InLine(rl, "k"))
	j.take()
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, startedThenFinished(sn, "transfer"), j.take())
	r := <-got
	require.NoError(t, r.err)
	assert.NotEqual(t, l.Token(), r.l.Token())
	require.NoError(t, r.l.Unlock(ctx))
}

// fairStartingNode is a startingNode that also queues (redlock.FairQueuer)
// and starts its fair calls (redlock.FairStarter).
type fairStartingNode struct{ *startingNode }

func (n fairStartingNode) Notify(ctx context.Context, key string, released func(string)) (func(), error) {
	return n.Backend.(redlock.Notifier).Notify(ctx, key, released)
}

func (n fairStartingNode) AcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) (bool, int64, error) {
	return n.Backend.(redlock.FairQueuer).AcquireFair(ctx, key, token, ttl, ticket, score, stay, attempt)
}

func (n fairStartingNode) LeaveQueue(ctx context.Context, key, ticket string) error {
	return n.Backend.(redlock.FairQueuer).LeaveQueue(ctx, key, ticket)
}

func (n fairStartingNode) ReleaseFair(ctx context.Context, key, token, ticket string, announce bool) (bool, error) {
	return n.Backend.(redlock.FairQueuer).ReleaseFair(ctx, key, token, ticket, announce)
}

func (n fairStartingNode) NotifyGrants(ctx context.Context, key, locker string, granted func(string)) (func(), error) {
	return n.Backend.(redlock.FairQueuer).NotifyGrants(ctx, key, locker, granted)
}

type fairFinisher struct {
	n    *startingNode
	call func() (bool, int64, error)
}

func (f fairFinisher) FinishFair() (bool, int64, error) {
	f.n.j.add("finish %s", f.n.Name())
	return f.call()
}

func (n fairStartingNode) StartAcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) redlock.FairPending {
	n.j.add("start acquire fair %s", n.Name())
	return fairFinisher{n.startingNode, func() (bool, int64, error) {
		return n.AcquireFair(ctx, key, token, ttl, ticket, score, stay, attempt)
	}}
}

func (n fairStartingNode) StartReleaseFair(ctx context.Context, key, token, ticket string, announce bool) redlock.Pending {
	return n.start("release fair", func() (bool, error) { return n.ReleaseFair(ctx, key, token, ticket, announce) })
}

// TestFairRoundsOverFairStartersStartEveryNodeFirst: over nodes that are
// all FairStarters, a fair call's attempt, its lock's extension and its
// fair release start every node's call, then finish each in turn, and
// answer as the calls would (the attempt of a call behind the holder is
// refused, and its entry counts as ahead).
func TestFairRoundsOverFairStartersStartEveryNodeFirst(t *testing.T) {
	sn, _, j := startingNodes(t, 3)
	bs := make([]redlock.Backend, len(sn))
	for i, n := range sn {
		bs[i] = fairStartingNode{n}
	}
	rl, err := redlock.New(bs, redlock.WithFairness())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	want := func(op string) []string { return startedThenFinished(sn, op) }
	l, err := rl.Lock(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, want("acquire fair"), j.take())
	require.NoError(t, l.Extend(ctx, time.Minute))
	assert.Equal(t, want("extend"), j.take())
	_, err = rl.Lock(ctx, "k", redlock.WithStrategy(redlock.Reject()))
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "the key is held")
	j.take()
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, want("release fair"), j.take())
}

// TestRoundsOverStartersReportFailedStarts: a node whose Start failed (a
// refused dial) is a failed vote with its error, told to the observer,
// and the round does not wait for it.
func TestRoundsOverStartersReportFailedStarts(t *testing.T) {
	sn, bs, _ := startingNodes(t, 3)
	refused := errors.New("dial: connection refused")
	sn[1].fail = refused
	var mu sync.Mutex
	var events []redlock.Event
	rl, err := redlock.New(bs, redlock.WithObserver(redlock.ObserverFunc(func(e redlock.Event) {
		if e.Kind == redlock.EventNodeError {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	})))
	require.NoError(t, err)
	l, err := tryLock(t.Context(), rl, "k")
	require.NoError(t, err, "two of three granted")
	require.NoError(t, l.Unlock(t.Context()))

	sn[2].fail = refused
	_, err = tryLock(t.Context(), rl, "k")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Granted)
	require.Len(t, qe.Failed, 2)
	for _, f := range qe.Failed {
		assert.ErrorIs(t, f.Err, refused)
	}
	mu.Lock()
	defer mu.Unlock()
	var acquires int
	for _, e := range events {
		assert.ErrorIs(t, e.Err, refused)
		if e.Op == "acquire" {
			acquires++
		}
	}
	assert.Equal(t, 3, acquires, "one failed acquire in the first round, two in the second")
}

// TestRoundsFallBackWithoutStarters: one node that is not a Starter, or
// a fenced acquisition, and the round runs the plain calls.
func TestRoundsFallBackWithoutStarters(t *testing.T) {
	sn, bs, j := startingNodes(t, 3)
	plain := append([]redlock.Backend{sn[0].Backend}, bs[1:]...)
	rl, err := redlock.New(plain)
	require.NoError(t, err)
	l, err := tryLock(t.Context(), rl, "k")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.Empty(t, j.take(), "no Start with a node that is not a Starter")

	fenced, err := redlock.New(bs, redlock.WithFencing())
	require.NoError(t, err)
	l, err = tryLock(t.Context(), fenced, "f")
	require.NoError(t, err)
	for _, e := range j.take() {
		assert.NotContains(t, e, "acquire", "a fenced acquisition is not started")
	}
	require.NoError(t, l.Unlock(t.Context()))
}

func (n *startingNode) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	return n.Backend.(redlock.Fencer).AcquireFenced(ctx, key, token, ttl)
}

func (n *startingNode) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	return n.Backend.(redlock.Fencer).RaiseFence(ctx, key, token, fence)
}
