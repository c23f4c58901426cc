package goredis

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer sends the commands that concurrent callers issue to one node as
// pipelines: one round trip and one write for a whole batch, instead of one
// per caller, which is what lets a Redlock serve many goroutines.
//
// Every caller is bounded by its own deadline, whoever else shares the
// node. A caller that finds the node idle sends its command at once,
// itself, on its own context, exactly as without coalescing. Callers that
// arrive while a command is in flight queue up and wait for their result
// or for their own context to end, whichever comes first: one that gives up
// while queued is withdrawn and its command never sent; one that gives up
// while its batch is in flight returns at once, its outcome unknown,
// exactly as after a network timeout, and the batch carries on for the
// others. Queued commands are sent by a sender goroutine, never by a
// caller, so no caller waits for another's command.
//
// The sender goroutine's lifetime. It is started when a flight lands with
// commands queued behind it, takes the whole queue as a batch, sends it,
// wakes its callers, and repeats while commands queued up during the
// flight; it returns as soon as a batch lands and the queue is empty. Each
// batch runs on a context detached from its callers' cancellation (one
// caller that gives up must not fail the others), bounded by the latest
// of their deadlines, and cancelled as soon as every caller in it has
// given up; a batch of one runs on its caller's own context. go-redis
// bounds reads and writes by the context's deadline (the client must have
// ContextTimeoutEnabled, which New checks), and dials and
// waits for a pooled connection also by its cancellation. So the sender
// ends within the deadline of the last command it carries: it outlives
// the call that started it only while it sends commands of callers that
// still wait, or that gave up while their batch was in flight, until that
// batch's deadline. The lockers always give node calls a deadline (the
// per-node timeout); a command without one is bounded only by the
// client's ReadTimeout and WriteTimeout.
//
// The one trade-off is the caller alone: it is bounded by its deadline
// but, like any go-redis call, by its cancellation only while dialling or
// waiting for a connection, not while reading the reply. Handing its
// command to a goroutine would honour cancellation there too, at the cost
// of a goroutine start and a wake-up per command, which doubled the time
// of a lone command on the test machine (35 µs to 75 µs against a local
// redis-server); the per-node timeout bounds what it can cost.
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

// process runs cmd on the node, batched with whatever else is waiting, and
// returns cmd's error. A caller that sent cmd alone returns when go-redis
// does. A queued caller whose ctx ends first returns ctx's error at once:
// if cmd was still queued it is never sent; if it was in flight, its
// outcome is unknown and it is still being written by the sender, so the
// caller must not read it.
func (q *coalescer) process(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err // a caller that gave up sends nothing
	}
	q.mu.Lock()
	if !q.busy { // alone: send it ourselves, on our own context
		q.busy = true
		q.mu.Unlock()
		_ = q.c.Process(ctx, cmd)
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

// recycle returns the error of a call whose result the caller took (or
// that was never sent) and puts the call back in the pool.
func (q *coalescer) recycle(w *call) error {
	err := w.cmd.Err()
	*w = call{done: w.done}
	calls.Put(w)
	return err
}

// startSender, called with q.mu held and q.busy set, starts the sender
// goroutine.
func (q *coalescer) startSender() {
	if q.sender == nil {
		q.sender = q.send
	}
	go q.sender()
}

// send is the sender goroutine: it sends the queue as batches until a
// batch lands with nothing queued behind it.
func (q *coalescer) send() {
	q.mu.Lock()
	for len(q.queue) > 0 {
		batch := q.queue
		q.queue = q.spare
		ctx, f := q.takeOff(batch)
		q.mu.Unlock()

		if len(batch) == 1 {
			_ = q.c.Process(ctx, batch[0].cmd)
		} else {
			pipe := q.c.Pipeline()
			for _, w := range batch {
				_ = pipe.Process(ctx, w.cmd)
			}
			_, _ = pipe.Exec(ctx) // each command carries its own result
			f.cancel()
		}

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

// takeOff, called with q.mu held, marks batch as in flight and returns the
// context to send it on. A batch of one runs on its caller's context; a
// larger one on a context detached from their cancellation, bounded by the
// latest of their deadlines (none if one of them has none), which the last
// caller to give up cancels.
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
