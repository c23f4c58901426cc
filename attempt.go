package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"
)

// waiter is one Lock call: its attempts (this file), the waiting between
// them (acquire.go), and what its failed attempts may have left on the
// nodes.
//
// Attempts come (1) at once, unless others of its locker already wait for
// the key (see joinsLine); (2) whenever a backoff delay runs out,
// whatever the waiter's place in line, so every waiter makes its own
// attempts within its strategy's delays and ErrTimeout always means that
// the last one found the key held; (3) with hand-off, when a release wakes
// the waiter (notify.go): such attempts count against the strategy's
// budget like any other (Retry(n) makes at most 1+n attempts).
type waiter struct {
	scope
	ctx context.Context

	attempts  int
	last      []error    // what each node said to the last attempt
	ownMay    bool       // a lock of the locker may have been on the nodes during the last attempt (refusedByOther)
	leftovers []leftover // SETs of failed attempts that may still hold a node
	watched   bool       // subscribing was tried (once per call)
	byOther   bool       // queued since another locker's lock refused the call, now or in a call before (joinQueues, subscribesFirst)
	waited    bool       // the call's first attempt did not take the lock
	sent      int        // the number of the latest attempt sent to the nodes (not refused by the locker itself)
	wake      *wakeup    // release announcements, once subscribed
	unwatch   func()
	gate      int           // the hand-off gate for woken attempts (gate.go), or -1
	xfer      *transferSlot // a semaphore call's, shared by its slots' waiters; nil for a lock's own
}

// tokenRandomLen is the length of a token's random part: a UUID's text.
const tokenRandomLen = 36

// newToken draws the random value one attempt stores under the key, a
// UUID v4 (tokenRandomLen bytes: 122 random bits from crypto/rand),
// followed by suffix, built in one allocation.
func newToken(suffix string) string {
	var u [16]byte
	rand.Read(u[:])         // never fails (it crashes the program if it cannot read)
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // variant RFC 4122
	var buf [tokenRandomLen]byte
	hex.Encode(buf[0:8], u[0:4])
	hex.Encode(buf[9:13], u[4:6])
	hex.Encode(buf[14:18], u[6:8])
	hex.Encode(buf[19:23], u[8:10])
	hex.Encode(buf[24:], u[10:])
	buf[8], buf[13], buf[18], buf[23] = '-', '-', '-', '-'
	var b strings.Builder
	b.Grow(tokenRandomLen + len(suffix))
	b.Write(buf[:])
	b.WriteString(suffix)
	return b.String()
}

// attempt tries once on every node with token: quorum and positive
// validity grant the lock. Anything less is rolled back at once (see
// rollback). gated sends the attempt to the hand-off gate first
// (gate.go). It returns the lock or the error, and what each node said
// (nil: granted; ErrNotAcquired: held by someone else; errNotAsked: not
// asked; another error: unknown).
func (w *waiter) attempt(token string, gated bool) (*Lock, []error, error) {
	cfg := w.cfg
	start := cfg.clock.Now()
	k := w.width()
	var counters []int64 // with fencing, what each node's INCRs returned: node i's at [i*k:(i+1)*k]
	if cfg.fencing {
		counters = make([]int64, len(w.nodes)*k)
	}
	s := w.scope // captured by value, not w: the waiter stays on Lock's stack
	call := func(ctx context.Context, i int, n *node) (bool, error) {
		if counters == nil {
			return s.what.acquire(ctx, s, n, token)
		}
		return s.what.acquireFenced(ctx, s, n, token, counters[i*k:(i+1)*k])
	}
	r, refused := w.round(call, gated)
	if refused != nil {
		return nil, r.errs, refused
	}
	left := validity(cfg.ttl, cfg.clock.Now().Sub(start), cfg.drift())
	if r.granted >= quorum(len(w.nodes)) && left > 0 && w.ctx.Err() == nil {
		var f []int64
		if counters != nil {
			var err error
			if f, err = w.fence(w.ctx, token, r, counters); err != nil {
				w.rollback(token, r)
				return nil, r.errs, err
			}
			left = validity(cfg.ttl, cfg.clock.Now().Sub(start), cfg.drift())
		}
		if left > 0 && w.ctx.Err() == nil {
			return w.grant(token, f, start), r.errs, nil
		}
	}
	w.rollback(token, r)
	return nil, r.errs, r.quorumError("acquire", w.key, left)
}

// round sends call to every node, or, gated, to the gate alone and then,
// unless the gate refused, to the others. When the gate refused it returns
// the contention error; a gate that failed is not used again in this call.
func (w *waiter) round(call nodeCall, gated bool) (round, error) {
	if !gated {
		return w.fanOut(w.ctx, "acquire", ErrNotAcquired, call), nil
	}
	r, held, failed := w.gatedRound(w.ctx, w.gate, call)
	if held {
		errs := make([]error, len(w.nodes))
		for i := range errs {
			errs[i] = errNotAsked
		}
		errs[w.gate] = ErrNotAcquired
		return round{nodes: w.nodes, errs: errs}, errGateHeld(w.key, w.nodes[w.gate])
	}
	if failed {
		w.gate = -1
		w.wake.gateOn(-1)
	}
	return r, nil
}

// grant makes the Lock of a granted attempt, valid from start.
func (w *waiter) grant(token string, fences []int64, start time.Time) *Lock {
	cfg := w.cfg
	return &Lock{key: w.key, keys: w.keys, what: w.what, token: token, fences: fences, slot: -1, nodes: w.nodes, cfg: cfg, acquired: start, watched: w.wake != nil,
		until: start.Add(cfg.ttl - cfg.drift())}
}

// A leftover is a node where a failed attempt's SET may have landed (the
// node granted, or did not answer) and whose release has not yet been
// answered.
type leftover struct {
	node  int
	token string
}

// rollback releases a failed attempt at once on every node that granted
// it or may have, each with the attempt's own token, together with the
// leftovers of earlier attempts whose release did not answer. A node that
// refused held someone else's key, so it cannot hold ours and is left
// alone. Releases run on a context detached from the caller's
// cancellation (a cancelled Lock must still let go), bounded by the
// per-node timeout.
//
// A SET delivered after its release (the network held it; the client had
// given up) leaves a key that nobody holds, until its TTL ends: it blocks
// the key, but no one believes they hold it, so exclusion is intact. Since
// every attempt has its own token, such a late command can neither be
// taken for a later attempt's grant nor delete a later attempt's key.
func (w *waiter) rollback(token string, r round) {
	for i, err := range r.errs {
		if err != ErrNotAcquired && err != errNotAsked {
			w.leftovers = append(w.leftovers, leftover{node: i, token: token})
		}
	}
	if len(w.leftovers) == 0 {
		return
	}
	undo := make([]*node, len(w.leftovers))
	for j, lo := range w.leftovers {
		undo[j] = w.nodes[lo.node]
	}
	s, leftovers, announce := w.scope, w.leftovers, !w.cfg.noHandoff // not w: see attempt
	rr := s.on(undo).fanOut(detached(w.ctx), "release", ErrNotHeld,
		func(ctx context.Context, j int, n *node) (bool, error) {
			return s.what.release(ctx, s, n, leftovers[j].token, announce)
		})
	unanswered := w.leftovers[:0]
	for j, err := range rr.errs {
		if err != nil && err != ErrNotHeld {
			unanswered = append(unanswered, w.leftovers[j])
		}
	}
	w.leftovers = unanswered
}
