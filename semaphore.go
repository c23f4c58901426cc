package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The semaphore: at most K holders of a name at once, each holding a
// permit that expires by itself like a lock.
//
// Why slots. Counting permits on each node independently ("a node grants
// while fewer than K hold it there; a client holds on a majority") is not
// safe over several nodes: with 3 nodes and 2 permits, holders A on nodes
// {1,2}, B on {2,3} and C on {1,3} each reach a majority while no node
// counts more than 2, so three hold at once (with N nodes, up to nearly
// twice the permits). A majority of one count does not exclude another
// majority of another count; it only excludes a majority for the same
// thing. So a semaphore of K permits is K slots, each slot a mutex of its
// own (key name + ":permit:" + i), and a permit is the lock of one slot:
// two holders of one slot would need two disjoint majorities, so there are
// never more holders than slots. The bound rests on exactly what the mutex
// rests on (bounded clock drift, masters that keep their data or stay down
// for a TTL), and needs nothing more.
//
// Acquire makes one attempt per slot, starting at a random slot and going
// round, and takes the first slot granted. Acquirers that all started at
// slot 0 would all meet there first: over one node all but one are refused
// and move on to meet again at slot 1, over several nodes their votes split
// and often nobody gets slot 0. Random starting points spread simultaneous
// acquirers over the free slots, so most get one at their first attempt.
// The cost is that a full semaphore costs an Acquire K rounds to find out.
//
// When every slot refused, the strategy decides, as for a lock: Reject
// fails at once, Retry waits out its delays and attempts again when one
// runs out. With hand-off, a waiter subscribes to the releases of every
// slot, so a release of any of them wakes it at once, and stands in each
// slot's line of its locker (line.go): within a locker, the first waiter
// gets the first permit released. Once subscribed, the attempts when a
// delay runs out are guided by the announcements (see retryPass): the
// slots that may have been freed, if the waiter is first in line for
// them, and one slot still believed held, in turn, for an expiry
// announces nothing; the last delay of a Retry is followed by an attempt
// on every slot. Attempting every held slot at every delay would cost a
// full semaphore's waiters a round per permit each time, and let a waiter
// behind others take the permit its locker had woken the first in line
// for. A
// waiter's subscriptions outlive its call only while other calls of the
// same Semaphore are in flight: the next waiter takes them over instead of
// subscribing again, and the last call to end stops them (see park).
//
// A permit's Unlock hands the slot over (handoff.go) to the first call of
// its locker in the slot's line that is not already being handed, or
// holding, a permit: one transfer round instead of a release, the
// announcement, and the woken waiter's gated attempt. A call takes
// transfers for all its slots through one transferSlot (xfer), so it is
// handed one permit at most.

// maxPermits bounds the permits of a Semaphore. A full semaphore costs an
// Acquire one round per permit, and a waiter one subscription per permit
// and node; beyond a few hundred permits a semaphore is rarely full, and
// these costs are better avoided with a coarser design.
const maxPermits = 256

// A Semaphore admits at most a fixed number of holders at once, each
// holding a permit: a *Lock on one of the semaphore's slots, which expires
// by itself like any lock (a crashed holder's permit frees itself within
// the TTL), renews, reports its loss (Lost), is released with Unlock,
// and carries the slot's fencing token (Slot, Fence). A Semaphore is
// safe for concurrent use.
//
// Over a Redlock, the bound holds under the mutex's assumptions (see the
// package documentation): each slot is a quorum lock of its own, because
// counting permits on every node independently would let more holders in
// (see the README's "Semaphore" section for the counterexample).
type Semaphore struct {
	lk   *Redlock
	name string
	keys []string // the slots' lock keys
	opts []Option

	mu     sync.Mutex
	calls  int              // acquisitions in flight
	parked [][]subscription // of ended calls, by slot, for the next (see park)
}

// NewSemaphore returns a semaphore of permits permits named name on l.
// Its slots are the
// lock keys name + ":permit:0" up to name + ":permit:<permits-1>"; over a
// Redis Cluster each slot key must be one the nodes can hold, as for any
// lock (a hash tag in name puts every slot on one cluster node). opts are
// the defaults for every Acquire, over l's own. An empty name, permits
// below 1 or above 256, a nil l, or an invalid option is ErrInvalid.
func NewSemaphore(l *Redlock, name string, permits int, opts ...Option) (*Semaphore, error) {
	if l == nil {
		return nil, invalidf("NewSemaphore: nil locker")
	}
	lk := l
	if name == "" {
		return nil, invalidf("empty semaphore name")
	}
	if permits < 1 || permits > maxPermits {
		return nil, invalidf("semaphore %q: %d permits, want 1 to %d", name, permits, maxPermits)
	}
	sm := &Semaphore{lk: lk, name: name, keys: make([]string, permits), opts: slices.Clone(opts)}
	for i := range sm.keys {
		sm.keys[i] = name + ":permit:" + strconv.Itoa(i)
		if err := checkKey(lk.nodes, sm.keys[i]); err != nil {
			return nil, err
		}
	}
	if _, err := sm.config(nil); err != nil {
		return nil, err
	}
	return sm, nil
}

// Name returns the semaphore's name.
func (sm *Semaphore) Name() string { return sm.name }

// Permits returns how many holders the semaphore admits at once.
func (sm *Semaphore) Permits() int { return len(sm.keys) }

// SlotKey returns the lock key of slot i, in [0, Permits()), and "" for
// any other i.
func (sm *Semaphore) SlotKey(i int) string {
	if i < 0 || i >= len(sm.keys) {
		return ""
	}
	return sm.keys[i]
}

// config merges the locker's options, the semaphore's and a call's.
func (sm *Semaphore) config(opts []Option) (*config, error) {
	cfg := sm.lk.cfg.with(append(slices.Clip(sm.opts), opts...))
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// Acquire takes one permit, following the strategy while all are held,
// and returns it as the lock of its slot: valid until its Until, released
// with Unlock, extended with Extend, renewing itself with WithAutoRenew,
// fenced per slot with WithFencing (Slot and Fence together identify it to
// a resource). The errors are Lock's: ErrNotAcquired (with Reject, when
// every slot is held), ErrTimeout (retries ran out while every slot stayed
// held), ErrUnavailable (too few nodes answered for any slot), ErrInvalid;
// a cancelled ctx stops waiting at once. Waiting with hand-off, a delay
// that runs out brings attempts on the slots whose release was announced
// (those this call is first in its locker's line for) and on one slot
// still believed held, in turn, rather than on every slot; the last delay
// of a Retry brings an attempt on every slot. The observer sees each slot's
// attempts as a lock's, and one EventAcquire per call, keyed by the
// granted slot's key (the semaphore's name when none was granted).
func (sm *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	if ctx == nil {
		return nil, invalidf("nil context")
	}
	cfg, err := sm.config(opts)
	if err != nil {
		return nil, err
	}
	l, err := sm.acquire(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.autoRenew {
		l.startRenewal(ctx)
	}
	return l, nil
}

// Do takes a permit, runs fn, and releases the permit however fn ends,
// exactly as Locker.Do does with a lock: the heartbeat renews the permit
// while fn runs, its loss cancels fn's context with a cause matching
// ErrLockLost, and FromContext finds the permit in fn's context (its Slot
// and Fence are what fn sends to a fenced resource). Do returns the
// acquisition's error if no permit was taken (fn did not run), otherwise
// fn's error, joined with one matching ErrLockLost if the permit was lost.
func (sm *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	if ctx == nil {
		return invalidf("nil context")
	}
	if fn == nil {
		return invalidf("nil function")
	}
	cfg, err := sm.config(opts)
	if err != nil {
		return err
	}
	if err := cfg.validateRenewal(); err != nil {
		return err
	}
	l, err := sm.acquire(ctx, cfg)
	if err != nil {
		return err
	}
	return hold(ctx, l, fn)
}

// acquire is Acquire without the heartbeat: every slot's waiter, in an
// order starting at a random slot, run by one semWaiter.
func (sm *Semaphore) acquire(ctx context.Context, cfg *config) (*Lock, error) {
	start := cfg.clock.Now()
	k := len(sm.keys)
	first := rand.IntN(k)
	sw := &semWaiter{sem: sm, ctx: ctx, name: sm.name, slots: make([]*waiter, k), index: make([]int, k)}
	ws := make([]waiter, k) // one allocation for every slot's waiter
	for j := range k {
		i := (first + j) % k
		s := scope{key: sm.keys[i], what: oneKey{}, nodes: sm.lk.nodes, cfg: cfg}
		ws[j] = waiter{scope: s, ctx: ctx, gate: -1}
		sw.slots[j], sw.index[j] = &ws[j], i
	}
	if s := ws[0].scope; s.transferable() {
		// One slot for every slot's waiter: the call is handed one permit
		// at most (handoff.go).
		sw.handed = make(chan struct{}, 1)
		sw.xfer = &transferSlot{s: s, wake: sw.hand, spend: sw.spend}
		for j := range ws {
			ws[j].xfer = sw.xfer
		}
	}
	sm.mu.Lock()
	sm.calls++
	sm.mu.Unlock()
	lock, err := sw.run()
	sm.park(sw)
	return scope{key: sm.name, what: oneKey{}, nodes: sm.lk.nodes, cfg: cfg}.settle(ctx, start, sw.attempts(), lock, err)
}

// semWaiter is one Acquire call: a waiter per slot (attempt.go makes their
// attempts, notify.go their wake-ups), and the strategy over all of them.
type semWaiter struct {
	sem     *Semaphore
	ctx     context.Context
	name    string
	slots   []*waiter // in the order this call tries them
	index   []int     // slots[j] is slot index[j]
	watched bool      // subscribing was tried (once per call)
	inLine  bool      // the call joined its locker's line without a first pass
	probe   int       // the slot (in slots) a guided pass attempts even if held

	xfer   *transferSlot // where an Unlock of the locker hands this call a permit (handoff.go); nil when not transferable
	handed chan struct{} // a permit was handed over
}

// hand and spend are xfer's wake-up: sent when a permit is handed over,
// spent when it is taken.
func (sw *semWaiter) hand() { signal(sw.handed) }

func (sw *semWaiter) spend() { drain(sw.handed) }

// transferred returns the permit handed to this call, if any, while the
// call is on.
func (sw *semWaiter) transferred() *Lock {
	if sw.xfer == nil || sw.ctx.Err() != nil {
		return nil
	}
	if l := sw.xfer.take(); l != nil {
		return sw.granted(l)
	}
	return nil
}

func (sw *semWaiter) cfg() *config { return sw.slots[0].cfg }

func (sw *semWaiter) attempts() int {
	n := 0
	for _, w := range sw.slots {
		n += w.attempts
	}
	return n
}

// run is waiter.run over every slot: a pass over the slots, then the
// strategy's delays, each waited out with wake-ups and followed by a pass.
func (sw *semWaiter) run() (*Lock, error) {
	if sw.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: %w (no attempt made)", ErrNotAcquired, context.Cause(sw.ctx))
	}
	var err error
	if sw.joinsLine() {
		sw.inLine = true
		err = fmt.Errorf("%w: semaphore %q: in line behind this locker's waiters", ErrNotAcquired, sw.name)
	} else if lock, e := sw.pass(); e == nil {
		return lock, nil
	} else {
		err = e
	}
	for retry := 0; ; retry++ {
		if sw.ctx.Err() != nil {
			return nil, cancelled(sw.ctx, err)
		}
		delay, ok := sw.cfg().strategy.Backoff(retry)
		if !ok {
			if lock := sw.transferred(); lock != nil {
				return lock, nil
			}
			return nil, exhausted(retry, sw.attempts(), err)
		}
		timer := sw.cfg().clock.After(delay)
		lock, e := sw.waitOut(timer, delay)
		if lock != nil {
			return lock, nil
		}
		if e != nil {
			err = e
		}
		if sw.ctx.Err() != nil {
			return nil, cancelled(sw.ctx, err)
		}
		if lock, e = sw.retryPass(retry); e == nil {
			return lock, nil
		}
		err = e
	}
}

// joinsLine reports whether others of this locker wait for a slot, so
// that this call stands in line behind them (see joinsLine).
func (sw *semWaiter) joinsLine() bool {
	for _, w := range sw.slots {
		if joinsLine(w.cfg, w.key) {
			return true
		}
	}
	return false
}

// pass makes one attempt on every slot, in order, and returns the first
// lock granted. Without any, the error says how many slots were held.
func (sw *semWaiter) pass() (*Lock, error) {
	order := make([]int, len(sw.slots))
	for j := range order {
		order[j] = j
	}
	return sw.passOver(order)
}

// passOver is pass over the slots at the positions order lists, in that
// order; with none of them it returns neither a lock nor an error.
func (sw *semWaiter) passOver(order []int) (*Lock, error) {
	var errs []error
	for _, j := range order {
		lock, err := sw.slots[j].try(false)
		if err == nil {
			return sw.granted(lock), nil
		}
		if sw.ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, sw.full(errs)
}

// granted marks lock as a permit of its slot: the one its key names, which
// for a permit handed over (taken by any slot's waiter) may not be the
// slot attempted.
//
// It also records the permit as its slot's holder in the locker's line
// for the slot, if any (line.held, as a mutex waiter does): until its
// Unlock, or its validity's end, the other calls of the locker take the
// slot as held without asking the nodes (waiter.heldHere).
func (sw *semWaiter) granted(lock *Lock) *Lock {
	lock.slot = slices.Index(sw.sem.keys, lock.key)
	sw.cfg().lines.held(lock.key, lock.own(), true)
	return lock
}

// retryPass is the pass made when the strategy's delay n ran out. Once
// the call is subscribed to the slots' releases it is guided by them: a
// slot that refused this call's last attempt on a quorum of its nodes, and
// announced no release since, is still held unless its holder's TTL ran
// out (an expiry announces nothing), and a slot whose release was
// announced was announced to the first in its locker's line too, who was
// woken for it. So the pass attempts the slots that may be free and for
// which the call is first in line, then one slot believed held, in turn
// (an expired permit is still found within Permits() passes). The last
// pass of a Retry strategy attempts every slot, so that ErrTimeout still
// means that every slot was found held; without subscriptions every pass
// does.
func (sw *semWaiter) retryPass(n int) (*Lock, error) {
	if !sw.subscribed() {
		return sw.pass()
	}
	if _, more := sw.cfg().strategy.Backoff(n + 1); !more {
		return sw.pass()
	}
	k := len(sw.slots)
	probe := sw.probe // a slot believed held, or if none is, the next one
	for d := range k {
		if j := (sw.probe + d) % k; !sw.slots[j].mayBeFree() {
			probe = j
			break
		}
	}
	sw.probe = (probe + 1) % k
	order := make([]int, 0, k)
	for j, w := range sw.slots {
		if j != probe && w.mayBeFree() && (w.wake == nil || w.wake.first()) {
			order = append(order, j)
		}
	}
	return sw.passOver(append(order, probe))
}

// subscribed reports whether any slot's releases reach this call.
func (sw *semWaiter) subscribed() bool {
	return slices.ContainsFunc(sw.slots, func(w *waiter) bool { return w.wake != nil })
}

// full is the error of attempts that all failed: ErrNotAcquired (with the
// first held slot's error) when any slot was held, since a permit is then
// only busy; otherwise the first slot's error (ErrUnavailable).
func (sw *semWaiter) full(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	held := slices.IndexFunc(errs, func(err error) bool { return errors.Is(err, ErrNotAcquired) })
	if held < 0 {
		return fmt.Errorf("semaphore %q: no slot could be decided: %w", sw.name, errs[0])
	}
	n := 0
	for _, err := range errs {
		if errors.Is(err, ErrNotAcquired) {
			n++
		}
	}
	return fmt.Errorf("semaphore %q: %d of %d slots attempted were held: %w", sw.name, n, len(errs), errs[held])
}

// waitOut is waiter.waitOut over every slot: it waits until timer fires
// or ctx ends, subscribing to every slot's releases first (once per call,
// with hand-off and a delay to wait), and attempts the slot whose release
// woke it.
func (sw *semWaiter) waitOut(timer <-chan time.Time, delay time.Duration) (*Lock, error) {
	var err error
	if !sw.watched && !sw.cfg().noHandoff && delay > 0 {
		sw.watched = true
		if lock, e := sw.watch(); lock != nil {
			return lock, nil
		} else if e != nil {
			err = e
		}
	}
	cases := sw.selectCases(timer)
	for {
		chosen, _, _ := reflect.Select(cases)
		if chosen < 2 { // ctx ended or the delay ran out
			return nil, err
		}
		if lock := sw.transferred(); lock != nil {
			return lock, nil
		}
		if chosen == 2 { // handed a permit, taken meanwhile or the call over
			continue
		}
		w := sw.slots[chosen-3]
		if w.gate < 0 && !spread(sw.ctx, len(w.nodes)) {
			continue // ctx ended: the next select returns
		}
		lock, e := w.try(true)
		if e == nil {
			return sw.granted(lock), nil
		}
		err = e
	}
}

// watch subscribes every slot's waiter to its releases, then attempts the
// slots it is first in line for: a release before the subscriptions is
// caught by that attempt, every later one by an announcement. It joins the
// slots' lines in slot order, whatever its order of attempts, so that of
// two waiters of a locker the one that came first is ahead in every line.
func (sw *semWaiter) watch() (*Lock, error) {
	set := sw.sem.unpark()
	for i := range sw.slots {
		w := sw.slots[slices.Index(sw.index, i)]
		w.watched = true
		if set == nil {
			w.watch()
		} else {
			w.rewatch(set[i])
		}
	}
	var order []int
	var held []error
	if sw.inLine {
		held = refusedByAll(len(sw.slots[0].nodes))
	}
	for j, w := range sw.slots {
		if w.wake == nil {
			continue
		}
		if held != nil {
			// This call made no attempt: others of its locker wait for
			// every slot, so each is taken as held until it announces a
			// release (a release before this point woke them; one during
			// the subscribing may be missed here, and is then found by a
			// probe or the last pass, as an expiry is).
			w.wake.record(held)
		}
		if w.wake.first() {
			order = append(order, j)
		}
	}
	return sw.passOver(order)
}

// refusedByAll is the outcome of an attempt that all of n nodes
// refused.
func refusedByAll(n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = ErrNotAcquired
	}
	return out
}

// selectCases are ctx's end, timer, a permit handed over, and each
// subscribed slot's wake-ups, in slot order (a nil channel never fires).
func (sw *semWaiter) selectCases(timer <-chan time.Time) []reflect.SelectCase {
	cases := make([]reflect.SelectCase, 3, 3+len(sw.slots))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sw.ctx.Done())}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(sw.handed)}
	for _, w := range sw.slots {
		var ch <-chan struct{}
		if w.wake != nil {
			ch = w.wake.ch
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	return cases
}

// stopWatching unsubscribes every slot and leaves their lines.
func (sw *semWaiter) stopWatching() {
	for _, w := range sw.slots {
		w.stopWatching()
	}
}

// mayBeFree reports whether w's slot may be free as far as its release
// announcements tell: not subscribed, or a quorum of its nodes (and the
// gate) not held since they last refused (see wakeup).
func (w *waiter) mayBeFree() bool {
	if w.wake == nil {
		return true
	}
	w.wake.mu.Lock()
	defer w.wake.mu.Unlock()
	return w.wake.freeLocked()
}

// Subscriptions kept between calls. Subscribing to every slot's releases
// and unsubscribing again costs a waiter about two fifths of the
// allocations of an acquisition on one node, and under contention one
// call's end is soon followed by another call's wait. So a call that ends
// while others of the semaphore are in flight leaves its lines but keeps
// its subscriptions, parked, and the next call to wait takes them over
// (rewatch) instead of subscribing; the last call in flight to end stops
// every parked subscription, so none outlives the calls.

// park ends sw's watching: parked if other calls are in flight and every
// slot was subscribed, else stopped; the last call out stops every parked
// set.
func (sm *Semaphore) park(sw *semWaiter) {
	var set []subscription
	if sw.watched && !slices.ContainsFunc(sw.slots, func(w *waiter) bool { return w.wake == nil }) {
		set = make([]subscription, len(sw.slots))
		for j, w := range sw.slots {
			w.wake.leave() // out of line first: a parked wakeup wakes nobody
			set[sw.index[j]] = subscription{w.wake, w.unwatch}
		}
	}
	if sw.xfer != nil {
		// Out of every line (or about to be): no transfer to this call
		// any more; a permit handed to it and not taken is released.
		defer sw.xfer.letGo(sw.ctx)
	}
	sm.mu.Lock()
	sm.calls--
	var drop [][]subscription
	if sm.calls > 0 && set != nil {
		sm.parked = append(sm.parked, set)
	} else {
		drop, sm.parked = sm.parked, nil
		set = nil
	}
	sm.mu.Unlock()
	if set == nil {
		sw.stopWatching()
	} else {
		for _, w := range sw.slots {
			w.unwatch = nil // parked, not stopped
		}
	}
	for _, subs := range drop {
		for _, sub := range subs {
			sub.stop()
		}
	}
}

// A subscription is one slot's wakeup and the function that stops it.
type subscription struct {
	wake *wakeup
	stop func()
}

// unpark returns a parked set of subscriptions, by slot, or nil.
func (sm *Semaphore) unpark() []subscription {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	n := len(sm.parked)
	if n == 0 {
		return nil
	}
	set := sm.parked[n-1]
	sm.parked = sm.parked[:n-1]
	return set
}

// rewatch is waiter.watch over a parked subscription: its state reset to
// a fresh wakeup's, the last attempt's outcome recorded, in line again.
func (w *waiter) rewatch(sub subscription) {
	wk := sub.wake
	wk.mu.Lock()
	clear(wk.own)
	clear(wk.held)
	clear(wk.heardFrom)
	wk.heard, wk.trying, wk.gate = false, false, -1
	drain(wk.ch)
	wk.mu.Unlock()
	w.wake, w.unwatch = wk, sub.stop
	wk.record(w.last)
	if len(w.nodes) > 1 {
		if g := gateFor(w.key, w.nodes); wk.notifies[g] {
			w.gate = g
			wk.gateOn(g)
		}
	}
	wk.transfer = w.xfer // the parked one's was its call's, gone
	w.cfg.lines.join(w.key, wk)
}
