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
// waiter under the Retry strategy whose nodes implement Notifier
// subscribes after its first failed attempt and, once the subscription is
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
// Within a process only the first in line for the key is woken (see
// queue): waking them all would make all but one fail an attempt and roll
// back. Across processes one waiter per process competes, and with several
// nodes the key's gate (gate.go) decides among them; BenchmarkHandoff in
// handoff_bench_test.go measures wait times and fairness. Reject does not
// wait and never subscribes, nor do uncontended acquisitions: the cost is
// paid only by waiters.

// ReleaseChannel returns the pub/sub channel on which release.lua
// announces that key was released, for operators and other clients that
// want to watch a lock: "redlock:released:" + key.
func ReleaseChannel(key string) string { return "redlock:released:" + key }

// Notifier is the optional interface of a Backend that can tell waiters
// that a key was released. The go-redis adapter implements it with one
// shared pub/sub connection per node, open only while someone waits.
type Notifier interface {
	// Notify subscribes to releases of key. It returns once the
	// subscription is active on the node, so no release after it returns
	// is missed. From then until stop is called, every release of key
	// calls released with the message's payload (release.lua publishes
	// the releasing token, so that a waiter can tell its own rollbacks),
	// from the node's receiving goroutine: released must be quick and must
	// not block. When the connection to the node dropped
	// and was restored, releases in between may have been missed: released
	// is then called with payload "", once the subscription is active
	// again. Calls with other payloads, or with no release behind them,
	// are possible too (a key of the same name in another database of the
	// server, a message published by someone else); a call means only that
	// the key may be free. stop must be called; it returns promptly and
	// only once no call to released is in progress or will follow.
	Notify(ctx context.Context, key string, released func(payload string)) (stop func(), err error)
}

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
// rollbacks) are ignored. So the attempts a Lock makes are bounded by its
// strategy plus the releases of others. Announcements that arrive during
// an attempt are kept and weighed when it ends.
//
// Within one process only the first waiter in line for the key is woken
// (see queue); the others keep their state and are not woken.
type wakeup struct {
	ch   chan struct{}
	line *queue

	mu        sync.Mutex
	notifies  []bool // the node is subscribed: its releases are announced to us
	held      []bool
	heardFrom []bool // announced during the attempt in flight
	heard     bool   // someone else announced during the attempt in flight
	trying    bool   // an attempt is in flight
	gate      int    // node whose release a wake-up waits for, or -1
	need      int    // free subscribed nodes that make a wake-up
	own       map[string]struct{}
}

func newWakeup(nodes int) *wakeup {
	return &wakeup{ch: make(chan struct{}, 1), notifies: make([]bool, nodes), held: make([]bool, nodes),
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
	w.need = min(quorum, n)
}

// gateOn makes wake-ups wait for node i's release (gate.go); -1 for none.
func (w *wakeup) gateOn(i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate = i
}

// released records node i's announcement of a release by token ("" when
// the node may have released without our hearing it).
func (w *wakeup) released(i int, token string) {
	w.mu.Lock()
	if _, mine := w.own[token]; mine && token != "" {
		w.mu.Unlock()
		return
	}
	w.held[i] = false
	fire := false
	if w.trying {
		w.heardFrom[i], w.heard = true, true
	} else {
		fire = w.freeLocked()
	}
	w.mu.Unlock()
	if fire && w.first() {
		w.wake()
	}
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

// begin marks the start of an attempt with token: its rollback's
// announcements are ours, and a pending wake-up is spent by it.
func (w *wakeup) begin(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.own[token] = struct{}{}
	w.trying, w.heard = true, false
	clear(w.heardFrom)
	select {
	case <-w.ch:
	default:
	}
}

// end records an attempt's outcome per node (see record) and wakes the
// waiter if others' announcements during the attempt freed enough nodes.
func (w *wakeup) end(outcome []error) {
	w.mu.Lock()
	w.recordLocked(outcome)
	w.trying = false
	fire := w.heard && w.freeLocked()
	w.mu.Unlock()
	if fire && w.first() {
		w.wake()
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

func (w *wakeup) wake() {
	select {
	case w.ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// A queue is the line of this process's waiters for one key on one set of
// nodes, in order of arrival. A release wakes only the first of them: the
// others would only lose the race to it (or to each other), each failed
// attempt costing a round to every node and a rollback that wakes everyone
// again. Waking one per process keeps the herd as small as the number of
// processes waiting, and makes waiters of one process take turns in
// arrival order. The others still attempt when their backoff delays run
// out, so a slow first waiter delays them by at most their delay.
type queue struct {
	id      string
	waiters []*wakeup
}

// lineTagger is a Backend whose keys are told apart by more than its Name:
// a tag joins the line's id. The go-redis adapter tags a database other
// than 0; a benchmark tags workers of one test binary so that they wait in
// separate lines, as separate processes would.
type lineTagger interface{ lineTag() string }

// queues holds the lines that have waiters; a line is dropped with its
// last waiter.
var queues = struct {
	sync.Mutex
	m map[string]*queue
}{m: map[string]*queue{}}

// lineID names the line of waiters for key on nodes.
func lineID(key string, nodes []Backend) string {
	id := make([]string, 0, len(nodes)+1)
	id = append(id, key)
	for _, b := range nodes {
		id = append(id, b.Name())
		if t, ok := b.(lineTagger); ok {
			id = append(id, t.lineTag())
		}
	}
	return strings.Join(id, "\x00")
}

// waiting reports whether this process has waiters in line for key on
// nodes. A new Lock call then queues behind them instead of barging in
// with an attempt of its own (see retryLoop): a worker that just released
// the key would otherwise often take it straight back from the waiter its
// release woke, and the line would not be a line.
func waiting(key string, nodes []Backend) bool {
	id := lineID(key, nodes)
	queues.Lock()
	defer queues.Unlock()
	return queues.m[id] != nil
}

// join puts w at the end of the line for id.
func join(id string, w *wakeup) {
	queues.Lock()
	defer queues.Unlock()
	q := queues.m[id]
	if q == nil {
		q = &queue{id: id}
		queues.m[id] = q
	}
	q.waiters = append(q.waiters, w)
	w.line = q
}

// first reports whether w is first in its line; a waiter that has not
// joined one (it is still subscribing) is not.
func (w *wakeup) first() bool {
	queues.Lock()
	defer queues.Unlock()
	return w.line != nil && w.line.waiters[0] == w
}

// leave takes w out of its line. A first waiter that leaves with an unused
// wake-up passes it on, so a release is not lost with it.
func (w *wakeup) leave() {
	queues.Lock()
	q := w.line
	if q == nil {
		queues.Unlock()
		return
	}
	w.line = nil
	i := slices.Index(q.waiters, w)
	q.waiters = slices.Delete(q.waiters, i, i+1)
	var next *wakeup
	if len(q.waiters) == 0 {
		delete(queues.m, q.id)
	} else if i == 0 {
		next = q.waiters[0]
	}
	queues.Unlock()
	if next != nil && len(w.ch) > 0 {
		next.wake()
	}
}

// watchReleases subscribes to releases of key on every node that supports
// it, each bounded by the per-node timeout, then puts the waiter in line.
// It returns nil when no node could be subscribed; otherwise the caller
// must call the stop function.
func watchReleases(ctx context.Context, nodes []Backend, cfg *config, key string) (*wakeup, func()) {
	w := newWakeup(len(nodes))
	stops := make([]func(), len(nodes))
	r := fanOut(ctx, nodes, cfg, "watch", key, errNoNotifier, func(ctx context.Context, i int, b Backend) (bool, error) {
		n, ok := b.(Notifier)
		if !ok {
			return false, nil
		}
		s, err := n.Notify(ctx, key, func(token string) { w.released(i, token) })
		stops[i] = s
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
		stop()
		return nil, nil
	}
	ok := make([]bool, len(nodes))
	for i, err := range r.errs {
		ok[i] = err == nil
	}
	w.subscribed(ok, quorum(len(nodes)))
	// In line only once subscribed, so the first in line is always one
	// that notifications reach.
	join(lineID(key, nodes), w)
	return w, stop
}

// errNoNotifier is the refusal of a node that cannot notify.
var errNoNotifier = invalidf("node cannot notify")
