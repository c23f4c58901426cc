package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The quorum rule. A lock over N independent nodes is held when a majority,
// N/2+1, granted it within its validity; two holders would need two
// disjoint majorities, which cannot exist. With N = 5 the lock survives two
// lost nodes; N = 4 also needs 3 and so survives only one, which is why odd
// N is preferred: the extra even node adds cost and no tolerance.
func quorum(n int) int { return n/2 + 1 }

// scope is what every round of one call shares: the key, the thing locked
// (target.go), the nodes the round asks, and the call's configuration.
type scope struct {
	key   string   // the key, or a set's name (setName) for events and errors
	keys  []string // a set's keys, canonical; nil for one key
	what  target
	nodes []Backend
	cfg   *config
}

// width is the number of keys, and so of fences, the lock holds.
func (s scope) width() int { return max(1, len(s.keys)) }

// on returns s asking nodes instead, a subset of its own.
func (s scope) on(nodes []Backend) scope {
	s.nodes = nodes
	return s
}

// nodeCall is one operation on node i.
type nodeCall func(ctx context.Context, i int, b Backend) (bool, error)

// round is the outcome of one operation sent to every node: per node, nil
// when it agreed, the refusal sentinel when it answered no, or the error.
type round struct {
	nodes   []Backend
	errs    []error
	granted int
}

// fanOut runs call on every node concurrently, each bounded by the per-node
// timeout, and returns when all have answered or timed out. No goroutine
// outlives it. refused is the error recorded for a node that answered no;
// any other error is reported to the observer as an EventNodeError of op.
//
// When every node is a Starter and the round is one of their calls
// (split), no goroutine is started at all: see fanOutStarted.
func (s scope) fanOut(ctx context.Context, op string, refused error, call nodeCall) round {
	r := round{nodes: s.nodes, errs: make([]error, len(s.nodes))}
	// One deadline for the round bounds every node call, as they all start
	// together; a context per node would cost allocations each.
	rc := newRoundCtx(ctx, s.cfg.timeout())
	defer rc.end(context.Canceled)
	if s.split(op) {
		s.fanOutStarted(rc, op, refused, call, r.errs)
	} else {
		s.fanOutGo(rc, op, refused, call, r.errs)
	}
	for _, err := range r.errs {
		if err == nil {
			r.granted++
		}
	}
	return r
}

// fanOutGo is fanOut with a goroutine per node but one: the calling
// goroutine does one node's work itself.
func (s scope) fanOutGo(ctx context.Context, op string, refused error, call nodeCall, errs []error) {
	var wg sync.WaitGroup
	for i := 1; i < len(s.nodes); i++ {
		wg.Go(func() { s.one(ctx, op, refused, call, errs, i) })
	}
	s.one(ctx, op, refused, call, errs, 0)
	wg.Wait()
}

// one runs call on node i and records its answer.
func (s scope) one(ctx context.Context, op string, refused error, call nodeCall, errs []error, i int) {
	var start time.Time
	if s.cfg.observer != nil {
		start = s.cfg.clock.Now()
	}
	ok, err := guarded(ctx, call, i, s.nodes[i])
	s.record(ctx, op, refused, errs, i, start, ok, err)
}

// guarded makes node i's call, turning a panic in the adapter or its
// client library (a node that answers garbage: a bulk length of 2^63-1
// makes go-redis panic) into the node's error. A round fans out to
// goroutines no caller can recover, so one bad node would otherwise take
// the process down, where the quorum rule already tolerates it.
func guarded(ctx context.Context, call nodeCall, i int, b Backend) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, &nodePanic{value: p}
		}
	}()
	return call(ctx, i, b)
}

// nodePanic is the error of a node call that panicked.
type nodePanic struct{ value any }

func (e *nodePanic) Error() string {
	return fmt.Sprintf("redlock: node call panicked (a bad reply, or a bug in the adapter): %v", e.value)
}

// record records node i's answer in errs, reporting an error that says
// something about the node to the observer (a refusal, or a transfer's
// ErrWaitersQueued, is an answer, not such an error).
func (s scope) record(ctx context.Context, op string, refused error, errs []error, i int, start time.Time, ok bool, err error) {
	if err == nil && !ok {
		err = refused
	}
	if err != nil && err != refused && !errors.Is(err, ErrWaitersQueued) && !callerGaveUp(ctx, err) {
		s.cfg.observe(Event{Kind: EventNodeError, Key: s.key, Node: s.nodes[i].Name(), Op: op,
			Duration: s.cfg.clock.Now().Sub(start), Err: err})
	}
	errs[i] = err
}

// split reports whether a round of op can run as started calls: a
// single-key acquire (not fenced), release or extend, over nodes that are
// all Starters, or a transfer over nodes that are all TransferStarters
// too; or a round of another target that says it splits (a splitter:
// a fair call's, fair.go), over Starters too.
func (s scope) split(op string) bool {
	switch w := s.what.(type) {
	case oneKey:
	case splitter:
		if !w.splits(op, s.nodes) {
			return false
		}
	default:
		return false
	}
	switch op {
	case "acquire":
		if s.cfg.fencing {
			return false
		}
	case "release", "extend":
	case "transfer":
		if lacking[TransferStarter](s.nodes) != nil {
			return false
		}
	default:
		return false
	}
	return lacking[Starter](s.nodes) == nil
}

// splitter is a target other than oneKey whose rounds of op over nodes
// can run as started calls (their Starter calls, or calls of its own that
// it starts on the stand-in, see starting).
type splitter interface {
	splits(op string, nodes []Backend) bool
}

// aheadCounter is a splitter whose started AcquireFair calls (starting.fp)
// answer through it at finish, as its acquire would.
type aheadCounter interface {
	counted(ok bool, ahead int64, err error) (bool, error)
}

// releaseFinisher is a target that finishes its started release calls
// itself: a fair lock's (fair.go), whose release may return a grant to a
// waiter of its own locker instead of announcing it (GrantPending).
type releaseFinisher interface {
	finishRelease(s scope, i int, p Pending) (bool, error)
}

// fanOutStarted is fanOut over Starters, without a goroutine: it starts
// every node's call from the calling goroutine, then finishes each in
// turn, so the nodes work on their commands at the same time and the
// round waits for the slowest, as with a goroutine per node. The round's
// call is run as it is, on a stand-in for each node (a starting) whose
// Acquire, Release, Extend or Transfer starts the node's call instead of
// making it; so the callers of fanOut need not know which way their round
// runs. A call that answers without reaching the node is taken as its
// answer.
func (s scope) fanOutStarted(ctx context.Context, op string, refused error, call nodeCall, errs []error) {
	sp := startings.Get().(*[]starting)
	st := *sp
	st = slices.Grow(st[:0], len(s.nodes))[:len(s.nodes)]
	observed := s.cfg.observer != nil
	rf, finishes := s.what.(releaseFinisher)
	finishes = finishes && op == "release"
	for i, b := range s.nodes {
		d := &st[i]
		d.Backend, d.st = b, b.(Starter)
		if observed {
			d.start = s.cfg.clock.Now()
		}
		d.ok, d.err = guarded(ctx, call, i, d)
	}
	for i := range st {
		d := &st[i]
		if d.p != nil || d.fp != nil {
			d.ok, d.err = guarded(ctx, func(context.Context, int, Backend) (bool, error) {
				switch {
				case d.p != nil && finishes:
					return rf.finishRelease(s, i, d.p)
				case d.p != nil:
					return d.p.Finish()
				default: // split allows it for an aheadCounter only
					return s.what.(aheadCounter).counted(d.fp.FinishFair())
				}
			}, i, d.Backend)
		}
		s.record(ctx, op, refused, errs, i, d.start, d.ok, d.err)
	}
	clear(st)
	*sp = st[:0]
	startings.Put(sp)
}

// starting stands in for a node during a started round (fanOutStarted):
// its Acquire, Release, Extend and Transfer, and the fair calls of
// fair.go, start the node's call and keep the Pending; whatever else the
// round's call asks of it goes to the node.
type starting struct {
	Backend
	st    Starter
	p     Pending
	fp    FairPending
	start time.Time
	ok    bool
	err   error
}

var startings = sync.Pool{New: func() any { return new([]starting) }}

func (d *starting) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	d.p = d.st.StartAcquire(ctx, key, token, ttl)
	return false, nil
}

func (d *starting) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	d.p = d.st.StartRelease(ctx, key, token, announce)
	return false, nil
}

func (d *starting) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	d.p = d.st.StartExtend(ctx, key, token, ttl)
	return false, nil
}

// Transfer starts the node's Transfer; split allows a transfer round only
// over TransferStarters.
func (d *starting) Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	d.p = d.Backend.(TransferStarter).StartTransfer(ctx, key, oldToken, newToken, ttl)
	return false, nil
}

// nodesThat returns the nodes whose answer matches err (errors.Is).
func (r round) nodesThat(err error) []Backend {
	var nodes []Backend
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
			e.Failed = append(e.Failed, NodeError{Node: r.nodes[i].Name(), Err: err})
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
		func(ctx context.Context, _ int, b Backend) (bool, error) {
			return s.what.release(ctx, s, b, token, announce)
		})
}

// callerGaveUp reports whether a node call failed only because the caller
// cancelled the round (Unlock stopping an extension in flight, a request
// that went away): that says nothing about the node, so it is no
// EventNodeError. A per-node timeout still is.
func callerGaveUp(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.Canceled) && errors.Is(err, context.Canceled)
}
