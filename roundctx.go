package redlock

import (
	"context"
	"sync"
	"time"
)

// roundCtx is the context of one round (fanOut): its parent's, with the
// per-node timeout as deadline. It is context.WithTimeout made cheap for
// the common case, in which nobody waits on Done: a node call whose
// client sets the deadline on its socket and reads the reply itself asks
// only Deadline and Err. So Done's
// channel, the timer that closes it at the deadline and the hook on the
// parent's cancellation are made only when Done is first called; until
// then Err compares the clock with the deadline. One allocation a round
// instead of context.WithTimeout's four and a timer started and stopped.
//
// It keeps the context.Context contract: Done is closed when the deadline
// passes, the parent ends or the round ends (end), and Err is nil until
// it is closed (or would be: Err itself closes it when it finds the
// deadline passed before the timer fired).
type roundCtx struct {
	context.Context // the parent, for Value and its cancellation

	deadline time.Time

	mu     sync.Mutex
	err    error         // once ended: DeadlineExceeded, the parent's error, or Canceled by end
	done   chan struct{} // made by the first Done
	timer  *time.Timer   // closes done at the deadline, once done is made
	unhook func() bool   // stops the hook on the parent's cancellation, once done is made
}

// newRoundCtx returns parent bounded by timeout from now; end must be
// called when the round is over.
func newRoundCtx(parent context.Context, timeout time.Duration) *roundCtx {
	d := time.Now().Add(timeout)
	if pd, ok := parent.Deadline(); ok && pd.Before(d) {
		d = pd
	}
	return &roundCtx{Context: parent, deadline: d}
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

func (c *roundCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	c.done = make(chan struct{})
	if c.err != nil {
		close(c.done)
		return c.done
	}
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
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
		c.timer.Stop()
		if c.unhook != nil {
			c.unhook()
		}
	}
}

func (c *roundCtx) String() string { return "redlock.roundCtx" }
