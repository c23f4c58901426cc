package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The quorum rule. A lock over N independent nodes is held when a majority,
// N/2+1, granted it within its validity; two holders would need two
// disjoint majorities, which cannot exist. With N = 5 the lock survives two
// lost nodes; N = 4 also needs 3 and so survives only one, which is why odd
// N is preferred: the extra even node adds cost and no tolerance.
func quorum(n int) int { return n/2 + 1 }

// nodeCall is one operation on node i.
type nodeCall func(ctx context.Context, i int, n *node) (bool, error)

// round is the outcome of one operation sent to every node: per node, nil
// when it agreed, the refusal sentinel when it answered no, or the error.
type round struct {
	nodes   []*node
	errs    []error
	granted int
}

// fanOut runs call on every node concurrently, each bounded by the per-node
// timeout, and returns when all have answered or timed out. No goroutine
// outlives it. refused is the error recorded for a node that answered no;
// any other error is reported to the observer as an EventNodeError of op.
func (s scope) fanOut(ctx context.Context, op string, refused error, call nodeCall) round {
	f := &fan{s: s, op: op, refused: refused, call: call}
	// One deadline for the round bounds every node call, as they all start
	// together; a context per node would cost allocations each.
	f.ctx.init(ctx, s.cfg.timeout())
	defer f.ctx.end(context.Canceled)
	n := len(s.nodes)
	if n <= len(f.inline) {
		f.errs = f.inline[:n]
	} else {
		f.errs = make([]error, n)
	}
	if n > 1 {
		f.work = f.worker // one func value: each go f.work() allocates nothing more
		f.wg.Add(n - 1)
		for range n - 1 {
			go f.work()
		}
	}
	f.one(0) // the calling goroutine does one node's work
	f.wg.Wait()
	r := round{nodes: s.nodes, errs: f.errs}
	for _, err := range r.errs {
		if err == nil {
			r.granted++
		}
	}
	return r
}

// fanInline is how many nodes' answers a fan holds without allocating.
const fanInline = 7

// fan is one round in flight, in one allocation: its context, what every
// node is asked, and the answers (for up to fanInline nodes). The round
// it returns keeps its answers, and a node call that keeps the context
// keeps the fan.
type fan struct {
	ctx     roundCtx
	s       scope
	op      string
	refused error
	call    nodeCall
	errs    []error
	inline  [fanInline]error
	next    atomic.Int32 // the last node taken by a goroutine (fan.worker)
	wg      sync.WaitGroup
	work    func() // f.worker, made once per round
}

// worker does the work of the next node of the round not yet taken.
func (f *fan) worker() {
	defer f.wg.Done()
	presize()
	f.one(int(f.next.Add(1)))
}

// presize grows the calling goroutine's stack to 8 KiB while it is still
// shallow. A node call runs about 3.5 KiB deep through go-redis (its pool,
// the socket), so a worker that starts at 2 KiB would grow twice on the
// way, each time copying a deep stack and adjusting every frame of it:
// about 5 µs of CPU per worker (a profile of a refused TryLock on three
// nodes: 11.5 µs per round in stack growth, 1.7 with presize).
//
//go:noinline
func presize() {
	var b [6 << 10]byte
	keepAlive(b[:])
}

// keepAlive keeps presize's array, so that the compiler reserves its frame.
//
//go:noinline
func keepAlive([]byte) {}

// one runs the round's call on node i and records its answer.
func (f *fan) one(i int) {
	s := f.s
	var start time.Time
	if s.cfg.observer != nil {
		start = s.cfg.clock.Now()
	}
	ok, err := guarded(&f.ctx, f.call, i, s.nodes[i])
	if err != nil && isTimeout(err) {
		err = s.timedOut(&f.ctx, err)
	}
	s.record(&f.ctx, f.op, f.refused, f.errs, i, start, ok, err)
}

// isTimeout reports whether err is a deadline that passed: the context's,
// or a socket's (a net.Error whose Timeout is true).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// timedOut says which deadline a node call that timed out missed: the
// per-node timeout, or the caller's own when it came first.
func (s scope) timedOut(ctx *roundCtx, err error) error {
	if d, ok := ctx.Context.Deadline(); ok && !d.After(ctx.deadline) {
		return fmt.Errorf("no answer before the caller's deadline: %w", err)
	}
	return fmt.Errorf("no answer within the node timeout (%v): %w", s.cfg.timeout(), err)
}

// guarded makes node i's call, turning a panic in the adapter or its
// client library (a node that answers garbage: a bulk length of 2^63-1
// makes go-redis panic) into the node's error. A round fans out to
// goroutines no caller can recover, so one bad node would otherwise take
// the process down, where the quorum rule already tolerates it.
func guarded(ctx context.Context, call nodeCall, i int, n *node) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, &nodePanic{value: p}
		}
	}()
	return call(ctx, i, n)
}

// nodePanic is the error of a node call that panicked.
type nodePanic struct{ value any }

func (e *nodePanic) Error() string {
	return "redlock: node call panicked (a bad reply, or a bug in the adapter): " + shorten(fmt.Sprint(e.value))
}

// record records node i's answer in errs, reporting an error that says
// something about the node to the observer (a refusal, or a transfer's
// errWaitersQueued, is an answer, not such an error).
func (s scope) record(ctx context.Context, op string, refused error, errs []error, i int, start time.Time, ok bool, err error) {
	if err == nil && !ok {
		err = refused
	}
	if err != nil && err != refused && err != errWaitersQueued && !callerGaveUp(ctx, err) {
		s.cfg.observe(Event{Kind: EventNodeError, Key: s.key, Node: s.nodes[i].name(), Op: op,
			Duration: s.cfg.clock.Now().Sub(start), Err: err})
	}
	errs[i] = err
}

// nodesThat returns the nodes whose answer matches err (errors.Is).
func (r round) nodesThat(err error) []*node {
	var nodes []*node
	for i, e := range r.errs {
		if e != nil && errors.Is(e, err) {
			nodes = append(nodes, r.nodes[i])
		}
	}
	return nodes
}

// quorumError describes a round that did not grant op.
func (r round) quorumError(op, key string, left time.Duration) *QuorumError {
	e := &QuorumError{Op: op, Key: key, Nodes: len(r.nodes), Quorum: quorum(len(r.nodes)),
		Granted: r.granted, Validity: left}
	failed := 0
	for _, err := range r.errs {
		if err != nil {
			failed++
		}
	}
	if failed > 0 {
		e.Failed = make([]NodeError, 0, failed) // at its final size: one allocation, not log2(N)
	}
	for i, err := range r.errs {
		if err != nil {
			e.Failed = append(e.Failed, NodeError{Node: r.nodes[i].name(), Err: err})
		}
	}
	return e
}

// everyNodeAnswered reports whether every node of a release round
// answered (released, or did not hold the token): no release of the
// round can still be on its way to a node.
func everyNodeAnswered(r round) bool {
	for _, err := range r.errs {
		if err != nil && err != ErrNotHeld {
			return false
		}
	}
	return true
}

// releaseAll runs release.lua on every node, with a context that survives
// the caller's cancellation (a cancelled request must still let go of its
// lock) but is bounded by the per-node timeout.
func (s scope) releaseAll(ctx context.Context, token string) round {
	announce := !s.cfg.noHandoff
	return s.fanOut(detached(ctx), "release", ErrNotHeld,
		func(ctx context.Context, _ int, n *node) (bool, error) {
			return s.what.release(ctx, s, n, token, announce)
		})
}

// detached returns ctx without its cancellation and deadline, for the
// rounds that let go (Unlock, rollback): ctx itself when it has neither
// (context.Background, or values on it), which saves WithoutCancel's
// allocation. The deadline is asked first: Done makes a context's
// channel if nobody asked for it yet (a Lock on the same context did).
func detached(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// callerGaveUp reports whether a node call failed only because the caller
// cancelled the round (Unlock stopping an extension in flight, a request
// that went away): that says nothing about the node, so it is no
// EventNodeError. A per-node timeout still is.
func callerGaveUp(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.Canceled) && errors.Is(err, context.Canceled)
}
