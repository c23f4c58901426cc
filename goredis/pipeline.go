package goredis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer sends the commands of concurrent callers to one node as
// pipelines: a caller that finds the node idle sends at once; those that
// come while a command is in flight queue up, and a sender goroutine sends
// the queue as one batch when it lands. Each caller is bounded by its own
// deadline: withdrawn while queued (never sent), or returning at once
// while its batch flies (outcome unknown). A batch's context ends with the
// latest deadline of its callers, or once all of them gave up.
type coalescer struct {
	c redis.UniversalClient

	mu     sync.Mutex
	busy   bool    // a lone command or the sender goroutine is in flight
	queue  []*call // waiting for the next batch, in arrival order
	spare  []*call // the last batch's slice, for the next queue
	solo   flight  // the flight of every batch of one (nothing to count)
	sender func()  // q.send as a func value, made once: go q.sender() allocates nothing
}

// call is one caller's command.
type call struct {
	ctx    context.Context
	cmd    redis.Cmder
	done   chan struct{} // capacity 1: receives once cmd has its result
	flight *flight       // nil while queued; the batch carrying cmd once sent
}

// flight is one batch in flight. Its fields are guarded by coalescer.mu.
type flight struct {
	live   int                // callers still waiting for the batch
	cancel context.CancelFunc // cancels the batch's context; nil for a batch of one
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// process runs cmd, batched with whatever else waits, and returns cmd's
// error, or ctx's when it ended first (then cmd must not be read).
func (q *coalescer) process(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err // a caller that gave up sends nothing
	}
	q.mu.Lock()
	if !q.busy { // alone: send it ourselves, on our own context
		q.busy = true
		q.mu.Unlock()
		q.processAlone(ctx, cmd)
		q.mu.Lock()
		if len(q.queue) > 0 {
			q.startSender() // for those who queued meanwhile
		} else {
			q.busy = false
		}
		q.mu.Unlock()
		return cmd.Err()
	}
	w := calls.Get().(*call)
	w.ctx, w.cmd = ctx, cmd
	q.queue = append(q.queue, w)
	q.mu.Unlock()

	select {
	case <-w.done:
		return q.recycle(w)
	case <-ctx.Done():
	}
	q.mu.Lock()
	f := w.flight
	if f == nil { // still queued: withdraw it, it was never sent
		i := slices.Index(q.queue, w)
		q.queue = slices.Delete(q.queue, i, i+1)
		q.mu.Unlock()
		_ = q.recycle(w)
		return ctx.Err()
	}
	select {
	case <-w.done: // it landed just now: the result is there
		q.mu.Unlock()
		return q.recycle(w)
	default:
	}
	// In flight: leave it to the sender, which will still write cmd and
	// signal w.done, so w is not recycled.
	var cancel context.CancelFunc
	if f.cancel != nil {
		if f.live--; f.live == 0 {
			cancel = f.cancel // nobody waits for this batch any more
		}
	}
	q.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return ctx.Err()
}

// recycle returns w's error and puts w back in the pool.
func (q *coalescer) recycle(w *call) error {
	err := w.cmd.Err()
	*w = call{done: w.done}
	calls.Put(w)
	return err
}

// startSender starts the sender goroutine; q.mu is held, q.busy set.
func (q *coalescer) startSender() {
	if q.sender == nil {
		q.sender = q.send
	}
	go q.sender()
}

// send sends the queue as batches until one lands with none behind it.
func (q *coalescer) send() {
	q.mu.Lock()
	for len(q.queue) > 0 {
		batch := q.queue
		q.queue = q.spare
		ctx, f := q.takeOff(batch)
		q.mu.Unlock()

		q.sendBatch(ctx, f, batch)

		q.mu.Lock() // callers check w.done under q.mu when they give up
		for i, w := range batch {
			w.done <- struct{}{}
			batch[i] = nil
		}
		q.spare = batch[:0]
	}
	q.busy = false
	q.mu.Unlock()
}

// sendBatch sends batch, one command alone or as a pipeline. This is the
// sender goroutine, which no caller can recover: a panic of go-redis
// reading a reply it cannot make sense of (a node answering garbage: a
// bulk length of 2^63-1 makes it panic) becomes every command's error, and
// send still signals every caller and sends what queued meanwhile.
func (q *coalescer) sendBatch(ctx context.Context, f *flight, batch []*call) {
	defer func() {
		if p := recover(); p != nil {
			for _, w := range batch {
				w.cmd.SetErr(&clientPanic{value: p})
			}
		}
		if f.cancel != nil {
			f.cancel()
		}
	}()
	if len(batch) == 1 {
		_ = q.c.Process(ctx, batch[0].cmd)
		return
	}
	pipe := q.c.Pipeline()
	for _, w := range batch {
		_ = pipe.Process(ctx, w.cmd)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own result
}

// processAlone is process's send of a lone command on its caller's
// goroutine, with the recovery of sendBatch: q.busy must be reset after a
// panic, or no later command would ever be sent.
func (q *coalescer) processAlone(ctx context.Context, cmd redis.Cmder) {
	defer func() {
		if p := recover(); p != nil {
			cmd.SetErr(&clientPanic{value: p})
		}
	}()
	_ = q.c.Process(ctx, cmd)
}

// clientPanic is the error of a command whose sending or reading made
// go-redis panic: the node's reply could not be read.
type clientPanic struct{ value any }

func (e *clientPanic) Error() string {
	return fmt.Sprintf("goredis: the node's reply could not be read (go-redis panicked: %v)", e.value)
}

// takeOff marks batch as in flight (q.mu held) and returns its context:
// its caller's for a batch of one, else batchContext's.
func (q *coalescer) takeOff(batch []*call) (context.Context, *flight) {
	if len(batch) == 1 {
		batch[0].flight = &q.solo
		return batch[0].ctx, &q.solo
	}
	ctx, cancel := batchContext(batch)
	f := &flight{live: len(batch), cancel: cancel}
	for _, w := range batch {
		w.flight = f
	}
	return ctx, f
}

// batchContext is detached from the callers' cancellation and bounded by
// their latest deadline (none if one has none).
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, w := range batch {
		d, ok := w.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
