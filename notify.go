package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
)

// Hand-off: waking waiters when a lock is released.
//
// release.lua PUBLISHes the releasing token on the key's release channel,
// "redlock:released:" followed by the key, when it deletes the key. A
// waiter under the Retry strategy whose nodes deliver announcements
// (driver.Subscriber) subscribes after its first failed attempt and, once the subscription is
// active, attempts again at once: a release that happened between the
// failed attempt and the subscription is caught by that attempt, and every
// later one by a notification. While it waits out a backoff delay, a
// notification makes it attempt at once.
//
// Retries and ErrTimeout are unchanged. Retry(n, d) still consults the
// strategy n times, attempts when each delay runs out, and gives up at the
// same moment as without hand-off; notified attempts are extra attempts
// inside the current delay, not retries. The delays are therefore an upper
// bound on the gap between attempts. A key that expires instead of being
// released publishes nothing: its waiters wake at their next delay, as
// without hand-off.
//
// When to wake is decided per node (see wakeup): a node that refused the
// waiter's last attempt is "held" until it announces a release; the waiter
// wakes when a quorum of its nodes is not held, on an announcement by
// someone else (its own rollbacks announce too, and are ignored by token).
// A fair release (fair.go) names the queue's head in its
// announcement, or grants it the key: only that waiter wakes, wherever it
// stands in its locker's line. Within a locker only the first in line
// for the key is woken by other releases (see line.go): waking them all
// would make all but one fail an attempt and roll back; and Unlock may
// not release at all but hand the key to that waiter (handoff.go). Across lockers
// (processes) one waiter per locker competes, and with several nodes the
// key's gate (gate.go) decides among them;
// BenchmarkHandoff in handoff_bench_test.go measures wait times and
// fairness. Reject does not
// wait and never subscribes, nor do uncontended acquisitions: the cost is
// paid only by waiters.

// wakeup turns the nodes' release announcements into wake-ups for one
// waiter (one Lock call), a send on ch.
//
// It keeps, per node, whether the node is held: it refused the waiter's
// last attempt, and has not announced a release since that attempt began.
// An announcement by someone else makes its node free; when that leaves a
// quorum of the subscribed nodes free (and the gate among them, when woken
// attempts go to the gate first), the waiter is woken. A Redlock release
// reaches the nodes one by one, so waking on the first node's message
// would send the waiter at nodes that have not released yet; and waiting
// for the gate keeps a woken waiter from asking a gate that has not
// released yet, being refused, and sleeping through the rest of the
// release.
//
// Only announcements wake: an attempt's own outcome never does (a round
// whose validity ran out leaves every node free, and waking on that would
// spin), and announcements carrying one of the waiter's own tokens (its
// rollbacks), or the token of its locker's last release of the key (of
// a lock a waiting call took) that every node answered before the waiter
// began (lines.released), are ignored. So the attempts a Lock makes are
// bounded by its strategy plus the releases of others. Announcements that
// arrive during an attempt are kept and weighed when it ends.
//
// Within one locker only the first waiter in line for the key is woken
// (see line); the others keep their state and are not woken.
type wakeup struct {
	ch      chan struct{}
	line    *line  // once joined; guarded by lines.mu
	hearing bool   // subscribed, and in line (lines.hears); guarded by lines.mu
	lines   *lines // the locker's

	mu        sync.Mutex
	notifies  []bool // the node is subscribed: its releases are announced to us
	held      []bool
	heardFrom []bool // announced during the attempt in flight
	heard     bool   // someone else announced during the attempt in flight
	trying    bool   // an attempt is in flight
	gate      int    // node whose release a wake-up waits for, or -1
	need      int    // free subscribed nodes that make a wake-up
	own       map[string]struct{}
	quorum    int
	ticket    string // a fair waiter's queue ticket (fair.go); "" otherwise
	named     bool   // an announcement named us the queue's head during the attempt in flight
	grantTok  string // a fair waiter's latest attempt's token, which releases grant it (fair.go)
	granted   []bool // the node announced a grant of grantTok
	trusted   []bool // the node refused grantTok's attempt: a grant of it came after that attempt ran there

	transfer *transferSlot // when Unlock may hand the key over (handoff.go), else nil; set under lines.mu once subscribed (lines.hears), or before the waiter joins a line again (semaphore's rewatch)
}

func newWakeup(nodes int, ls *lines) *wakeup {
	return &wakeup{ch: make(chan struct{}, 1), lines: ls, notifies: make([]bool, nodes), held: make([]bool, nodes),
		heardFrom: make([]bool, nodes), gate: -1, own: map[string]struct{}{}}
}

// subscribed records which nodes announce releases to us; a wake-up then
// needs a quorum of them free, or all of them when fewer are subscribed.
func (w *wakeup) subscribed(ok []bool, quorum int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for i, s := range ok {
		w.notifies[i] = s
		if s {
			n++
		}
	}
	w.need, w.quorum = min(quorum, n), quorum
}

// listening reports whether a fair waiter hears the grants of its latest
// attempt's token: that attempt began once subscribed (begin set
// grantTok), and a quorum of the nodes announce to us.
func (w *wakeup) listening() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grantTok != "" && w.need >= w.quorum
}

// gateOn makes wake-ups wait for node i's release (gate.go); -1 for none.
func (w *wakeup) gateOn(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = i
}

// released records node i's announcement of a release (payload: the
// releasing token, "" when the node may have released without our
// hearing it, or a fair release's form that names the queue's head, see
// splitAnnouncement).
//
// A fair waiter (w.ticket set) takes an announcement that names another
// waiter as no release at all: the node would refuse its attempt. One
// that names it wakes it even when it is not the first of its locker's
// line (the queue, not the line, orders fair waiters), and a grant of its
// latest attempt's token is recorded for claim (fair.go). A waiter that
// is not fair takes a grant to anyone as no release: the key is held.
// It reports whether it woke the waiter.
func (w *wakeup) released(i int, payload string) bool {
	grant, next, token := splitAnnouncement(payload)
	w.mu.Lock()
	named := next != "" && next == w.ticket
	switch {
	case grant && w.ticket == "", next != "" && w.ticket != "" && !named:
		w.mu.Unlock()
		return false
	case !grant:
		if _, mine := w.own[token]; mine && token != "" {
			w.mu.Unlock()
			return false
		}
	}
	if grant && named && token == w.grantTok {
		w.granted[i] = true
	}
	w.held[i] = false
	fire := false
	if w.trying {
		w.heardFrom[i], w.heard = true, true
		w.named = w.named || named
	} else {
		fire = w.claimableLocked() || w.freeLocked()
	}
	w.mu.Unlock()
	if fire && (named || w.first()) {
		w.wake()
		return true
	}
	return false
}

// splitAnnouncement splits a release announcement. release.lua announces
// the releasing token; release_fair.lua, when the queue has a head,
// "grant=" + its ticket + " " + the token it set the key to for it, or
// "next=" + its ticket + " " + the releasing token. A token begins with a
// hex digit, so it never begins with either prefix, and a ticket has no
// space.
func splitAnnouncement(payload string) (grant bool, next, token string) {
	rest, ok := strings.CutPrefix(payload, "next=")
	if !ok {
		if rest, ok = strings.CutPrefix(payload, "grant="); !ok {
			return false, "", payload
		}
		grant = true
	}
	next, token, _ = strings.Cut(rest, " ")
	return grant, next, token
}

// freeLocked reports whether enough nodes are free for an attempt to
// stand a chance.
func (w *wakeup) freeLocked() bool {
	if w.gate >= 0 && w.notifies[w.gate] && w.held[w.gate] {
		return false
	}
	free := 0
	for i, s := range w.notifies {
		if s && !w.held[i] {
			free++
		}
	}
	return free >= w.need
}

// claimableLocked reports whether releases granted the fair waiter's
// latest attempt's token on a quorum of the nodes that refused that
// attempt (see claim).
func (w *wakeup) claimableLocked() bool {
	if w.grantTok == "" { // not a fair waiter, or no attempt since subscribing
		return false
	}
	n := 0
	for i, g := range w.granted {
		if g && w.trusted[i] {
			n++
		}
	}
	return n >= w.quorum
}

// begin marks the start of an attempt with token: its rollback's
// announcements are ours, and a pending wake-up is spent by it.
func (w *wakeup) begin(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.own[token] = struct{}{}
	w.trying, w.heard, w.named = true, false, false
	if w.ticket != "" {
		w.grantTok = token
		clear(w.granted)
		clear(w.trusted)
	}
	clear(w.heardFrom)
	drain(w.ch)
}

// end records an attempt's outcome per node (see record) and wakes the
// waiter if others' announcements during the attempt freed enough nodes.
func (w *wakeup) end(outcome []error) {
	w.mu.Lock()
	w.recordLocked(outcome)
	w.trying = false
	if w.ticket != "" {
		for i, err := range outcome {
			w.trusted[i] = err == ErrNotAcquired
		}
	}
	fire := w.heard && (w.claimableLocked() || w.freeLocked())
	named := w.named
	w.mu.Unlock()
	if fire && (named || w.first()) {
		w.wake()
	}
}

// first reports whether w is first in its line; a waiter that has left
// its line is not.
func (w *wakeup) first() bool {
	w.lines.mu.Lock()
	defer w.lines.mu.Unlock()
	return w.line != nil && w.line.waiters[0] == w
}

// leave takes w out of its line. A first waiter that leaves with an unused
// wake-up passes it on, so a release is not lost with it.
func (w *wakeup) leave() {
	ls := w.lines
	ls.mu.Lock()
	l := w.line
	if l == nil {
		ls.mu.Unlock()
		return
	}
	w.line = nil
	i := slices.Index(l.waiters, w)
	l.waiters = slices.Delete(l.waiters, i, i+1)
	var next *wakeup
	if len(l.waiters) == 0 {
		delete(ls.m, l.key)
	} else if i == 0 {
		next = l.waiters[0]
	}
	ls.mu.Unlock()
	if next != nil && len(w.ch) > 0 {
		next.wake()
	}
}

// record takes an attempt made before subscribing as the starting point.
func (w *wakeup) record(outcome []error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recordLocked(outcome)
}

// recordLocked marks each node by what it said (nil: granted, then rolled
// back; ErrNotAcquired: refused; errNotAsked: no news; any other error:
// unknown, taken as held until the node announces), except the nodes
// heard from during the attempt.
func (w *wakeup) recordLocked(outcome []error) {
	for i, err := range outcome {
		switch {
		case err == errNotAsked, w.heardFrom[i]:
		case err == nil:
			w.held[i] = false
		default:
			w.held[i] = true
		}
	}
}

// errNotAsked marks a node that an attempt did not ask (a woken attempt
// refused by the gate asks no other node).
var errNotAsked = errors.New("redlock: node not asked")

// spend drops a pending wake-up.
func (w *wakeup) spend() { drain(w.ch) }

func (w *wakeup) wake() { signal(w.ch) }

// signal leaves a pending signal on ch, a channel of capacity one, unless
// one is pending already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// drain drops ch's pending signal, if any.
func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// waitsForReleases reports whether a call with cfg, refused, waits with
// hand-off on and a strategy that waits before its first retry: what
// standing in line (joinsLine) and subscribing first (subscribesFirst)
// count on.
func waitsForReleases(cfg *config) bool {
	d, ok := cfg.strategy.Backoff(0)
	return !cfg.noHandoff && ok && d > 0
}

// watchReleases subscribes to releases of key on every node that supports
// it, each bounded by the per-node timeout, then puts the waiter in line.
// It returns nil when no node could be subscribed; otherwise the caller
// must call the stop function.
//
// The waiter takes transfers (handoff.go) through t when t is not nil (a
// semaphore call's, shared by its slots), else through a slot of its own
// when its locks are transferable.
func (s scope) watchReleases(ctx context.Context, t *transferSlot) (*wakeup, func()) {
	nodes := s.nodes
	w := newWakeup(len(nodes), s.cfg.lines)
	if tok := s.cfg.lines.lastReleased(s.key); tok != "" {
		// Released on every node before this waiter began: its attempts
		// see what that release left, and its announcement, heard now,
		// would only cost a needless attempt (lines.released).
		w.own[tok] = struct{}{}
	}
	if f, ok := s.what.(*fairKey); ok { // before any announcement can arrive
		w.ticket, w.granted, w.trusted = f.ticket, make([]bool, len(nodes)), make([]bool, len(nodes))
	}
	// In line before subscribing, so that the locker's waiters take turns
	// in the order their calls came: a subscription that answers late
	// must not let a later call pass. Until it is subscribed, the waiter
	// has no transfer slot (Unlock releases instead of handing the key to
	// it, see claim), and a release it could not hear is seen by the
	// attempt it makes once subscribed (waitOut).
	s.cfg.lines.join(s.key, w)
	stops := make([]func(), len(nodes))
	r := s.fanOut(ctx, "watch", errNoNotifier, func(ctx context.Context, i int, n *node) (bool, error) {
		if n.sub == nil {
			return false, nil
		}
		announced := func(payload string) { w.released(i, payload) }
		stop, err := s.what.notify(ctx, s, n, announced)
		stops[i] = stop
		return err == nil, err
	})
	stop := func() {
		for _, s := range stops {
			if s != nil {
				s()
			}
		}
		w.leave()
	}
	if r.granted == 0 {
		// It may have stood first while a release went unheard: the
		// next in line attempts (leave passes the wake-up on).
		w.wake()
		stop()
		return nil, nil
	}
	ok := make([]bool, len(nodes))
	for i, err := range r.errs {
		ok[i] = err == nil
	}
	w.subscribed(ok, quorum(len(nodes)))
	if t == nil && s.transferable() {
		t = &transferSlot{s: s, wake: w.wake, spend: w.spend}
	}
	s.cfg.lines.hears(w, t)
	return w, stop
}

// hears records that w, in line, is subscribed to the key's releases,
// and gives it the slot t through which Unlock may hand it the key (nil:
// none) (watchReleases).
func (ls *lines) hears(w *wakeup, t *transferSlot) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	w.hearing, w.transfer = true, t
}
