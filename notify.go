package redlock

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// Hand-off: waking waiters when a lock is released.
//
// release.lua PUBLISHes on the key's release channel, "redlock:released:"
// followed by the key, when it deletes the key. A waiter under the Retry
// strategy whose nodes implement Notifier subscribes after its first
// failed attempt and, once the subscription is active, attempts again at
// once: a release that happened between the failed attempt and the
// subscription is caught by that attempt, and every later one by a
// notification, so no release is slept through. While it waits out a
// backoff delay, a notification makes it attempt at once.
//
// Retries and ErrTimeout are unchanged. Retry(n, d) still consults the
// strategy n times and gives up at the same moment as without hand-off;
// notified attempts are extra attempts inside the current delay, not
// retries, and a failed one goes back to waiting for the same deadline.
// The delays are therefore an upper bound on the gap between attempts.
// A key that expires instead of being released publishes nothing: its
// waiters wake at their next delay, as without hand-off.
//
// A waiter is woken once a quorum of nodes announced a release (see
// wakeup), and within a process only the first in line for the key (see
// queue): waking them all would make all but one fail an attempt and roll
// back, and the rollbacks would wake everyone again. Across processes one
// waiter per process competes, and with several nodes the key's gate
// (gate.go) decides among them; BenchmarkHandoff in handoff_bench_test.go
// measures wait times and fairness. Reject does not wait and never subscribes, nor do uncontended
// acquisitions: the cost is paid only by waiters.

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
	// calls released with the message's payload (release.lua is to publish
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

// wakeup turns the nodes' release notifications into one wake-up for a
// waiter: a send on ch once a quorum of distinct nodes announced a release
// since the last reset (or one node, when only that few can notify). A
// Redlock release reaches every node, and waking on the first node's
// message would send the waiter at nodes that have not released yet; a
// quorum of messages means the key is free on enough nodes to be taken.
//
// Within one process, only the first waiter in line for the key is woken
// (see queue); the others keep counting and drop what they counted.
type wakeup struct {
	ch   chan struct{}
	line *queue

	mu   sync.Mutex
	seen []bool
	n    int
	need int
}

// released records that node i announced a release.
func (w *wakeup) released(i int) {
	w.mu.Lock()
	if w.seen[i] {
		w.mu.Unlock()
		return
	}
	w.seen[i] = true
	w.n++
	w.fireLocked()
}

// lower makes do with at most n nodes' announcements, when only n nodes
// could be subscribed.
func (w *wakeup) lower(n int) {
	w.mu.Lock()
	w.need = min(w.need, n)
	w.fireLocked()
}

// fireLocked, called with w.mu held, which it releases: when a quorum of
// announcements is in, it forgets them and wakes the waiter if it is first
// in line.
func (w *wakeup) fireLocked() {
	fire := w.n >= w.need
	if fire {
		clear(w.seen)
		w.n = 0
	}
	w.mu.Unlock()
	if fire && w.first() {
		w.wake()
	}
}

func (w *wakeup) wake() {
	select {
	case w.ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// reset forgets earlier announcements, before an attempt: only releases
// after it can make the attempt's outcome stale.
func (w *wakeup) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.seen)
	w.n = 0
	select {
	case <-w.ch:
	default:
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

// lineTagger lets a benchmark stand one process's Backends in for another
// process's: a tag joins the line's id, so workers of one test binary can
// wait in separate lines as separate processes would.
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
	w := &wakeup{ch: make(chan struct{}, 1), seen: make([]bool, len(nodes)), need: quorum(len(nodes))}
	stops := make([]func(), len(nodes))
	r := fanOut(ctx, nodes, cfg, "watch", key, errNoNotifier, func(ctx context.Context, i int, b Backend) (bool, error) {
		n, ok := b.(Notifier)
		if !ok {
			return false, nil
		}
		s, err := n.Notify(ctx, key, func(string) { w.released(i) })
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
	// In line only once subscribed, so the first in line is always one
	// that notifications reach.
	join(lineID(key, nodes), w)
	w.lower(r.granted)
	return w, stop
}

// errNoNotifier is the refusal of a node that cannot notify.
var errNoNotifier = invalidf("node cannot notify")
