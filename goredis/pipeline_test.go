package goredis

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
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
	c := redistest.Client(t, miniredis.RunT(t).Addr())
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

// flying reports whether a command or batch is in flight.
func (q *coalescer) flying() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy && len(q.queue) == 0
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
	testwait.Until(t, `g.singles.Load() == 1`, func() bool { return g.singles.Load() == 1 })
	for i := 1; i <= waiters; i++ {
		wg.Go(func() {
			cmd := redis.NewIntCmd(t.Context(), "incr", "n")
			assert.NoError(t, q.process(t.Context(), cmd))
			results[i] = cmd.Val()
		})
	}
	testwait.Until(t, `q.queued() == waiters`, func() bool { return q.queued() == waiters })
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
	testwait.Until(t, `g.singles.Load() == 1`, func() bool { return g.singles.Load() == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- q.process(ctx, redis.NewIntCmd(ctx, "incr", "n")) }()
	testwait.Until(t, `q.queued() == 1`, func() bool { return q.queued() == 1 })
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
	ctx, stop := batchContext([]*call{{ctx: short}, {ctx: long}})
	defer stop()
	d, ok := ctx.Deadline()
	require.True(t, ok)
	ld, _ := long.Deadline()
	assert.Equal(t, ld, d, "the batch lives as long as its most patient caller")
	ctx, stop = batchContext([]*call{{ctx: short}, {ctx: context.Background()}})
	defer stop()
	_, ok = ctx.Deadline()
	assert.False(t, ok)
}

// silentServer accepts connections on 127.0.0.1, reads what they send and
// never answers, like a node that hangs. It stops with the test.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			} else {
				conns = append(conns, c)
				wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
			}
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// result is what a process call returned and how long it took.
type result struct {
	err  error
	took time.Duration
}

// await returns what r delivers, or fails the test when nothing came within
// the watchdog (a guard against hanging, not a measure of time).
func await(t *testing.T, r <-chan result) result {
	t.Helper()
	select {
	case got := <-r:
		return got
	case <-time.After(watchdog):
		t.Error("the caller did not return")
		return result{}
	}
}

func processAsync(q *coalescer, ctx context.Context) <-chan result {
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		err := q.process(ctx, redis.NewIntCmd(ctx, "incr", "n"))
		ch <- result{err, time.Since(start)}
	}()
	return ch
}

// TestCoalescerCallerKeepsItsOwnDeadline: on a node that never answers, a
// caller with a short deadline that shares a batch with a caller with a
// long one returns at its own deadline, not at the batch's, even when it is
// the first in the batch (which used to send it and wait for it).
func TestCoalescerCallerKeepsItsOwnDeadline(t *testing.T) {
	q := &coalescer{c: redistest.Client(t, silentServer(t))}
	const first, short, long = 300 * time.Millisecond, 600 * time.Millisecond, 10 * time.Second

	// A first command flies; the next two queue behind it and go out
	// together when it times out.
	ctx0, cancel0 := context.WithTimeout(t.Context(), first)
	defer cancel0()
	r0 := processAsync(q, ctx0)
	testwait.Until(t, `q.flying()`, func() bool { return q.flying() })
	ctxS, cancelS := context.WithTimeout(t.Context(), short)
	defer cancelS()
	rS := processAsync(q, ctxS)
	testwait.Until(t, `q.queued() == 1`, func() bool { return q.queued() == 1 }) // the short one first: it would lead the batch
	ctxL, cancelL := context.WithTimeout(t.Context(), long)
	defer cancelL()
	rL := processAsync(q, ctxL)
	testwait.Until(t, `q.queued() == 2`, func() bool { return q.queued() == 2 })
	require.Empty(t, r0, "both queued while the first was in flight")
	assert.Error(t, (<-r0).err)

	s := <-rS
	assert.ErrorIs(t, s.err, context.DeadlineExceeded)
	select {
	case <-rL:
		t.Fatal("the long caller returned with the short one")
	default:
	}
	assert.Less(t, s.took, long/4, "the short caller returned at its own deadline, not the batch's")
	cancelL()
	assert.ErrorIs(t, (<-rL).err, context.Canceled)
}

// TestCoalescerCancelledCallerReturnsPromptly: a caller without a deadline
// whose command is in flight on a node that never answers, first in a
// batch with a caller with a long deadline, returns as soon as it is
// cancelled.
func TestCoalescerCancelledCallerReturnsPromptly(t *testing.T) {
	q := &coalescer{c: redistest.Client(t, silentServer(t))}
	const first, long = 300 * time.Millisecond, 10 * time.Second

	ctx0, cancel0 := context.WithTimeout(t.Context(), first)
	defer cancel0()
	r0 := processAsync(q, ctx0)
	testwait.Until(t, `q.flying()`, func() bool { return q.flying() })
	ctxC, cancelC := context.WithCancel(t.Context())
	defer cancelC()
	rC := processAsync(q, ctxC)
	testwait.Until(t, `q.queued() == 1`, func() bool { return q.queued() == 1 })
	ctxL, cancelL := context.WithTimeout(t.Context(), long)
	defer cancelL()
	rL := processAsync(q, ctxL)
	testwait.Until(t, `q.queued() == 2`, func() bool { return q.queued() == 2 })
	require.Empty(t, r0, "both queued while the first was in flight")
	<-r0
	testwait.Until(t, `q.queued() == 0`, func() bool { return q.queued() == 0 }) // the two are in flight

	start := time.Now()
	cancelC()
	c := <-rC
	took := time.Since(start)
	assert.ErrorIs(t, c.err, context.Canceled)
	select {
	case <-rL:
		t.Fatal("the long caller returned with the cancelled one")
	default:
	}
	assert.Less(t, took, long/4, "the cancelled caller returned at once, not at the batch's deadline")
	cancelL()
	assert.ErrorIs(t, (<-rL).err, context.Canceled)
}

// holdPipes is a go-redis hook that holds every pipeline of incr commands
// until its context ends or the test releases it, and hands its context to
// the test.
type holdPipes struct {
	ctxs    chan context.Context
	release chan struct{}
}

func (h *holdPipes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdPipes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "incr" {
			h.ctxs <- ctx
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-h.release:
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdPipes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "incr" {
			h.ctxs <- ctx
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-h.release:
			}
		}
		return next(ctx, cmds)
	}
}

// TestCoalescerBatchCancelledWhenAllGaveUp: a batch in flight keeps going
// while one of its callers waits, and its context is cancelled once the
// last one gave up, so the sender stops (here: at the hook; in go-redis: in
// a dial or a wait for a pooled connection).
func TestCoalescerBatchCancelledWhenAllGaveUp(t *testing.T) {
	_, _, c := gatedCoalescer(t, false)
	h := &holdPipes{ctxs: make(chan context.Context, 4), release: make(chan struct{})}
	defer close(h.release)
	c.AddHook(h)
	q := &coalescer{c: c}

	ctx0, cancel0 := context.WithCancel(t.Context())
	r0 := processAsync(q, ctx0)
	solo := <-h.ctxs
	ctxA, cancelA := context.WithCancel(t.Context())
	rA := processAsync(q, ctxA)
	testwait.Until(t, `q.queued() == 1`, func() bool { return q.queued() == 1 })
	ctxB, cancelB := context.WithCancel(t.Context())
	rB := processAsync(q, ctxB)
	testwait.Until(t, `q.queued() == 2`, func() bool { return q.queued() == 2 })
	cancel0() // a batch of one runs on its caller's context
	assert.ErrorIs(t, await(t, r0).err, context.Canceled)
	<-solo.Done()

	batch := <-h.ctxs // A and B in flight as one pipeline
	cancelA()
	assert.ErrorIs(t, await(t, rA).err, context.Canceled, "the first of the batch returns at once")
	assert.NoError(t, batch.Err(), "B still waits for the batch")
	cancelB()
	assert.ErrorIs(t, await(t, rB).err, context.Canceled)
	select {
	case <-batch.Done(): // the last caller to give up cancelled it
	case <-time.After(watchdog):
		t.Error("the batch was not cancelled")
	}
}

// TestCoalescerLoneCallerDoesNotSendTheQueue: when a command sent alone
// lands with others queued behind it, its caller returns at once, and the
// queue goes out without it.
func TestCoalescerLoneCallerDoesNotSendTheQueue(t *testing.T) {
	_, _, c := gatedCoalescer(t, false)
	h := &holdPipes{ctxs: make(chan context.Context, 4), release: make(chan struct{})}
	defer close(h.release)
	c.AddHook(h)
	q := &coalescer{c: c}

	r0 := processAsync(q, t.Context())
	<-h.ctxs // in flight
	r1 := processAsync(q, t.Context())
	testwait.Until(t, `q.queued() == 1`, func() bool { return q.queued() == 1 })
	h.release <- struct{}{} // the lone command lands
	<-h.ctxs                // the queued one is in flight, held
	assert.NoError(t, await(t, r0).err, "the lone caller returned while the queue it left is in flight")
	h.release <- struct{}{}
	assert.NoError(t, await(t, r1).err)
	testwait.Until(t, `!q.flying()`, func() bool { return !q.flying() })
}

// TestCoalescerCallerThatGaveUpSendsNothing: a context that has already
// ended sends nothing.
func TestCoalescerCallerThatGaveUpSendsNothing(t *testing.T) {
	q, g, _ := gatedCoalescer(t, false)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, q.process(ctx, redis.NewIntCmd(ctx, "incr", "n")), context.Canceled)
	assert.Zero(t, g.singles.Load())
	assert.False(t, q.flying())
}

// panicky is a go-redis hook that panics as go-redis does reading a bulk
// length of 2^63-1, on the next lone INCR (solo) or the next pipeline of
// them (piped); after holdNext, it holds the next lone INCR until hold
// closes.
type panicky struct {
	solo, piped, holdNext atomic.Bool
	hold                  chan struct{}
	held                  atomic.Int64
}

func (h *panicky) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *panicky) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "incr" {
			if h.solo.CompareAndSwap(true, false) {
				panic("runtime error: makeslice: len out of range")
			}
			if h.holdNext.CompareAndSwap(true, false) {
				h.held.Add(1)
				<-h.hold
			}
		}
		return next(ctx, cmd)
	}
}

func (h *panicky) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "incr" && h.piped.CompareAndSwap(true, false) {
			panic("runtime error: makeslice: len out of range")
		}
		return next(ctx, cmds)
	}
}

// isBusy reports whether a command or the sender is in flight.
func (q *coalescer) isBusy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.busy
}

// A panic of go-redis while it sends or reads (a node answering garbage)
// is the error of every command it concerns, on the sender goroutine,
// which no caller can recover, and on a lone caller's; either way every
// caller returns, and the coalescer sends the next commands.
func TestCoalescerRecoversClientPanic(t *testing.T) {
	c := redistest.Client(t, miniredis.RunT(t).Addr())
	require.NoError(t, c.Ping(t.Context()).Err())
	h := &panicky{hold: make(chan struct{})}
	c.AddHook(h)
	q := &coalescer{c: c}
	incr := func() (int64, error) {
		cmd := redis.NewIntCmd(t.Context(), "incr", "n")
		err := q.process(t.Context(), cmd)
		return cmd.Val(), err
	}
	panicked := func(err error) {
		t.Helper()
		var cp *clientPanic
		require.ErrorAs(t, err, &cp)
		assert.ErrorContains(t, err, "could not be read")
		assert.ErrorContains(t, err, "makeslice: len out of range", "the error carries the panic's value")
	}

	// A batch: the first caller flies, held; three queue behind it and go
	// out as one pipeline, which panics on the sender goroutine.
	first := make(chan error, 1)
	h.holdNext.Store(true)
	go func() { _, err := incr(); first <- err }()
	testwait.Until(t, "the first caller in flight", func() bool { return h.held.Load() == 1 })
	const queued = 3
	errs := make(chan error, queued)
	for range queued {
		go func() { _, err := incr(); errs <- err }()
	}
	testwait.Until(t, "three callers queued", func() bool { return q.queued() == queued })
	h.piped.Store(true)
	close(h.hold)
	require.NoError(t, <-first)
	for range queued {
		select {
		case err := <-errs:
			panicked(err)
		case <-time.After(watchdog):
			t.Fatal("a caller of the batch that panicked did not return")
		}
	}
	testwait.Until(t, "the sender done", func() bool { return !q.isBusy() })
	n, err := incr()
	require.NoError(t, err, "the coalescer sends after a batch panicked")
	assert.EqualValues(t, 2, n, "the first INCR and this one ran; the batch's never reached the node")

	// A lone caller: the panic reaches it (the core recovers it too), and
	// the coalescer is idle again after it.
	h.solo.Store(true)
	_, err = incr()
	panicked(err)
	assert.False(t, q.isBusy(), "a lone caller's panic leaves the coalescer idle")
	n, err = incr()
	require.NoError(t, err, "the coalescer sends after a lone command panicked")
	assert.EqualValues(t, 3, n)
}
