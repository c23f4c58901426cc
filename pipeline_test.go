package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate is a go-redis hook that counts single commands and pipelines, and
// can hold single commands until released, so a test can line callers up
// behind one in flight.
type gate struct {
	singles, pipelines, piped atomic.Int64
	hold                      chan struct{} // nil: never hold
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "incr" {
			return next(ctx, cmd)
		}
		g.singles.Add(1)
		if g.hold != nil {
			<-g.hold
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "incr" { // not the client's own connection set-up
			g.pipelines.Add(1)
			g.piped.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

func gatedCoalescer(t *testing.T, hold bool) (*coalescer, *gate, *redis.Client) {
	ms, _ := minis(t, 1)
	c := client(t, ms[0].Addr())
	require.NoError(t, c.Ping(t.Context()).Err())
	g := &gate{}
	if hold {
		g.hold = make(chan struct{})
	}
	c.AddHook(g)
	return &coalescer{c: c}, g, c
}

func (q *coalescer) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached")
}

func TestCoalescerLoneCallerSendsAtOnce(t *testing.T) {
	q, g, _ := gatedCoalescer(t, false)
	for range 20 {
		cmd := redis.NewIntCmd(t.Context(), "incr", "n")
		require.NoError(t, q.process(t.Context(), cmd))
	}
	assert.EqualValues(t, 20, g.singles.Load(), "a caller alone is never queued or piped")
	assert.Zero(t, g.pipelines.Load())
}

func TestCoalescerBatchesConcurrentCallers(t *testing.T) {
	q, g, c := gatedCoalescer(t, true)
	const waiters = 10
	var wg sync.WaitGroup
	results := make([]int64, waiters+1)
	wg.Go(func() { // the first caller flies and is held in flight
		cmd := redis.NewIntCmd(t.Context(), "incr", "n")
		assert.NoError(t, q.process(t.Context(), cmd))
		results[0] = cmd.Val()
	})
	waitFor(t, func() bool { return g.singles.Load() == 1 })
	for i := 1; i <= waiters; i++ {
		wg.Go(func() {
			cmd := redis.NewIntCmd(t.Context(), "incr", "n")
			assert.NoError(t, q.process(t.Context(), cmd))
			results[i] = cmd.Val()
		})
	}
	waitFor(t, func() bool { return q.queued() == waiters })
	close(g.hold)
	wg.Wait()

	assert.EqualValues(t, 1, g.pipelines.Load(), "the ten who queued went out as one pipeline")
	assert.EqualValues(t, waiters, g.piped.Load())
	seen := map[int64]bool{}
	for _, v := range results {
		seen[v] = true
	}
	assert.Len(t, seen, waiters+1, "every caller got its own reply")
	n, err := c.Get(t.Context(), "n").Int()
	require.NoError(t, err)
	assert.Equal(t, waiters+1, n)
}

func TestCoalescerWithdrawsCallerThatGivesUpWhileQueued(t *testing.T) {
	q, g, c := gatedCoalescer(t, true)
	var wg sync.WaitGroup
	wg.Go(func() {
		assert.NoError(t, q.process(t.Context(), redis.NewIntCmd(t.Context(), "incr", "n")))
	})
	waitFor(t, func() bool { return g.singles.Load() == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- q.process(ctx, redis.NewIntCmd(ctx, "incr", "n")) }()
	waitFor(t, func() bool { return q.queued() == 1 })
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
	assert.Zero(t, q.queued())
	close(g.hold)
	wg.Wait()
	n, err := c.Get(t.Context(), "n").Int()
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a withdrawn command is never sent")
	assert.Zero(t, g.pipelines.Load())

	// The node is idle again: the next caller goes straight through.
	require.NoError(t, q.process(t.Context(), redis.NewIntCmd(t.Context(), "incr", "n")))
}

func TestCoalescerUnderLoadLosesNothing(t *testing.T) {
	q, g, c := gatedCoalescer(t, false)
	const workers, each = 16, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				assert.NoError(t, q.process(t.Context(), redis.NewIntCmd(t.Context(), "incr", "n")))
			}
		})
	}
	wg.Wait()
	n, err := c.Get(t.Context(), "n").Int()
	require.NoError(t, err)
	assert.Equal(t, workers*each, n)
	assert.EqualValues(t, workers*each, g.singles.Load()+g.piped.Load())
	q.mu.Lock()
	defer q.mu.Unlock()
	assert.False(t, q.busy, "idle at the end")
}

func TestCoalescerBatchOutlivesOneCallersDeadline(t *testing.T) {
	short, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	long, cancel2 := context.WithTimeout(t.Context(), 2*time.Hour)
	defer cancel2()
	ctx, stop := batchContext([]*queuedCall{{ctx: short}, {ctx: long}})
	defer stop()
	d, ok := ctx.Deadline()
	require.True(t, ok)
	ld, _ := long.Deadline()
	assert.Equal(t, ld, d, "the batch lives as long as its most patient caller")
	ctx, stop = batchContext([]*queuedCall{{ctx: short}, {ctx: context.Background()}})
	defer stop()
	_, ok = ctx.Deadline()
	assert.False(t, ok)
}
