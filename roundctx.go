package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// roundCtx is the context of one round (fanOut): its parent's, with the
// per-node timeout as deadline. It is context.WithTimeout made cheap: it
// lives in the round's fan (quorum.go), so it costs no allocation of its
// own, and Done's channel, the timer that closes it at the deadline and
// the hook on the parent's cancellation are made only when Done is first
// called; until then Err compares the clock with the deadline. A client
// that sets the deadline on its socket and reads the reply itself may
// never ask Done, but go-redis does on every command (its pool checks
// ctx.Done() before it takes a connection), so with goredis Done is asked
// in every round: then the channel is the one allocation, and the timer
// comes from a pool (deadlineTimer). context.WithTimeout would cost four
// allocations, and a timer started and stopped.
//
// It keeps the context.Context contract: Done is closed when the deadline
// passes, the parent ends or the round ends (end), and Err is nil until
// it is closed (or would be: Err itself closes it when it finds the
// deadline passed before the timer fired).
type roundCtx struct {
	context.Context // the parent, for Value and its cancellation

	deadline time.Time

	mu     sync.Mutex
	err    error          // once ended: DeadlineExceeded, the parent's error, or Canceled by end
	done   chan struct{}  // made by the first Done
	timer  *deadlineTimer // closes done at the deadline, once done is made
	unhook func() bool    // stops the hook on the parent's cancellation, once done is made
}

// init sets up c, zero, as parent bounded by timeout from now; end must
// be called when the round is over.
func (c *roundCtx) init(parent context.Context, timeout time.Duration) {
	d := time.Now().Add(timeout)
	if pd, ok := parent.Deadline(); ok && pd.Before(d) {
		d = pd
	}
	c.Context, c.deadline = parent, d
}

func (c *roundCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *roundCtx) Err() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := c.Context.Err(); err != nil {
		c.end(err)
		return c.Err()
	}
	if !time.Now().Before(c.deadline) {
		c.end(context.DeadlineExceeded)
		return c.Err()
	}
	return nil
}

// closedChan is the Done of a round that ended before Done was asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c *roundCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	if c.err != nil {
		c.done = closedChan
		return c.done
	}
	c.done = make(chan struct{})
	c.timer = startDeadlineTimer(c)
	if c.Context.Done() != nil {
		parent := c.Context
		c.unhook = context.AfterFunc(parent, func() { c.end(parent.Err()) })
	}
	return c.done
}

// end ends the context with err, unless it has ended already: the round
// is over (context.Canceled, as a cancel func would), the deadline
// passed, or the parent ended.
func (c *roundCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
		c.timer.stop()
		if c.unhook != nil {
			c.unhook()
		}
	}
}

func (c *roundCtx) String() string { return "redlock.roundCtx" }

// A deadlineTimer ends a round at its deadline. Its time.AfterFunc timer
// and the func it runs are made once and serve round after round: a round
// that ends before its deadline stops the timer and puts it back in
// deadlineTimers, which saves the two allocations of a timer per round.
// Only a timer whose Stop reports that it will not fire goes back, so a
// reused timer never fires for the round before.
type deadlineTimer struct {
	t     *time.Timer
	round atomic.Pointer[roundCtx] // the round it is set for
}

var deadlineTimers sync.Pool // of *deadlineTimer, stopped

// startDeadlineTimer sets a deadlineTimer to end c at its deadline.
func startDeadlineTimer(c *roundCtx) *deadlineTimer {
	d, _ := deadlineTimers.Get().(*deadlineTimer)
	if d == nil {
		d = new(deadlineTimer)
		d.round.Store(c)
		d.t = time.AfterFunc(time.Until(c.deadline), d.fire)
		return d
	}
	d.round.Store(c)
	d.t.Reset(time.Until(c.deadline))
	return d
}

func (d *deadlineTimer) fire() { d.round.Load().end(context.DeadlineExceeded) }

// stop stops d, and recycles it unless it fired (or is firing): then it
// is left to the garbage collector with its round.
func (d *deadlineTimer) stop() {
	if d.t.Stop() {
		d.round.Store(nil)
		deadlineTimers.Put(d)
	}
}
