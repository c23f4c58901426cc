package redlock

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
// It needs no goroutine of its own. A lone caller finds the node idle and
// sends its command at once, exactly as without coalescing. Callers that
// arrive while a command is in flight queue up; when the flight lands, its
// caller hands the whole queue to the first waiter, which sends it as one
// pipeline and hands on again. Every caller waits on its own context: one
// that gives up while queued is withdrawn before anything is sent; one that
// gives up while its batch is in flight returns at once, its outcome
// unknown, exactly as after a network timeout.
type coalescer struct {
	c redis.UniversalClient

	mu    sync.Mutex
	busy  bool          // a command or batch is in flight
	queue []*queuedCall // waiting for the next batch
}

type queuedCall struct {
	ctx   context.Context
	cmd   redis.Cmder
	wake  chan struct{} // closed when cmd has its result, or when this call leads
	batch []*queuedCall // set when this call is to send the batch
}

// process runs cmd on the node, batched with whatever else is waiting, and
// returns cmd's error. When the caller's context ended while cmd was in
// flight it returns the context's error at once, and cmd is still being
// written by the batch: the caller must not read it.
func (q *coalescer) process(ctx context.Context, cmd redis.Cmder) error {
	q.mu.Lock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		_ = q.c.Process(ctx, cmd)
		q.handOff()
		return cmd.Err()
	}
	w := &queuedCall{ctx: ctx, cmd: cmd, wake: make(chan struct{})}
	q.queue = append(q.queue, w)
	q.mu.Unlock()

	select {
	case <-w.wake:
	case <-ctx.Done():
		q.mu.Lock()
		if i := slices.Index(q.queue, w); i >= 0 { // never sent: withdraw
			q.queue = slices.Delete(q.queue, i, i+1)
			q.mu.Unlock()
			return ctx.Err()
		}
		q.mu.Unlock()
		select {
		case <-w.wake: // promoted to lead, or just done
		default:
			return ctx.Err() // in flight; its outcome is unknown
		}
	}
	if w.batch != nil {
		q.send(w.batch)
		q.handOff()
	}
	return cmd.Err()
}

// handOff ends a flight: the queue becomes the next batch, led by its first
// call, or the node goes idle.
func (q *coalescer) handOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.busy = false
		return
	}
	lead := q.queue[0]
	lead.batch, q.queue = q.queue, nil
	close(lead.wake)
}

// send runs a batch as one pipeline and wakes every call in it but the
// leader (whose wake is already closed). The pipeline runs on a context
// detached from any one caller's cancellation, bounded by the latest of
// their deadlines: a caller that gave up must not fail the others.
func (q *coalescer) send(batch []*queuedCall) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	if len(batch) == 1 {
		_ = q.c.Process(ctx, batch[0].cmd)
		return
	}
	pipe := q.c.Pipeline()
	for _, w := range batch {
		_ = pipe.Process(ctx, w.cmd)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own result
	for _, w := range batch[1:] {
		close(w.wake)
	}
}

func batchContext(batch []*queuedCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, w := range batch {
		d, ok := w.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}
