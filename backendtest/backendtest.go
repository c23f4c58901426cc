package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// Target is one node under test, as open returns it for one subtest.
type Target struct {
	// Backend is the adapter under test. Required.
	Backend redlock.Backend

	// Elapse lets d pass on the node's clock, so that keys set with a TTL
	// of at most d expire. For a node with a fake clock it moves that
	// clock (miniredis: (*miniredis.Miniredis).FastForward). nil means the
	// node runs on real time and the suite sleeps (time.Sleep) instead.
	Elapse func(d time.Duration)

	// Stall, when set, makes the node stop answering until the returned
	// resume function is called: a paused server (SIGSTOP) or a proxy
	// that holds the traffic. Connections stay open and what was sent
	// while stalled may still be delivered after resume. The suite calls
	// resume exactly once, also when a check fails. The Stall subtests
	// skip when it is nil.
	Stall func() (resume func())

	// TTL is the time to live the suite gives the keys whose expiry it
	// checks; zero means DefaultTTL. On real time, the suite sleeps about
	// 1.5 TTL for each of those checks, and a check needs up to three
	// round trips to the node to fit in one TTL (and one in half a TTL):
	// raise it for a node far away. A check whose round trips did not fit
	// is retried (see Run), it does not fail. With a fake clock (Elapse
	// set) the TTL costs no time.
	TTL time.Duration
}

// DefaultTTL is the TTL of keys whose expiry the suite checks when
// Target.TTL is zero. It suits a node on the same machine or network.
const DefaultTTL = 100 * time.Millisecond

// The suite's time bounds. They are generous upper bounds that tell a
// call that returns from one that hangs, never timing claims.
const (
	// CallTimeout is the deadline of every call the suite makes, except
	// those of the Context checks. An adapter that honours deadlines
	// never comes near it.
	CallTimeout = 10 * time.Second
	// PromptBound is how long a call with an already cancelled context,
	// or a stop function, may take to return; and how long an expected
	// notification may take to arrive.
	PromptBound = 5 * time.Second
	// StallDeadline is the deadline of the calls the Stall checks make
	// to a stalled node, and StallBound how long they may take to return.
	StallDeadline = 100 * time.Millisecond
	StallBound    = 2 * time.Second
	// Quiet is how long the suite waits for a notification that must not
	// come. It is a bounded negative check: a call that comes later is
	// not seen.
	Quiet = 200 * time.Millisecond
	// Racers is the number of goroutines of the Concurrency checks.
	Racers = 16
	// reapBound is how long the suite waits, after reporting a call that
	// did not return within its bound, for it to return before
	// abandoning its goroutine.
	reapBound = time.Minute
	// longTTL is the TTL of keys whose expiry no check waits for. Keys
	// left on a shared server vanish after it.
	longTTL = 30 * time.Second
	// tries is how often a check whose round trips did not fit in a TTL
	// on real time is run, with fresh keys, before it fails.
	tries = 3
)

// KeyPrefix starts every key the suite uses. The rest of a key is the
// subtest's name and a random suffix, inside a hash tag ({...}) so that a
// key and its fence counter (key + ":fence") share a cluster slot.
const KeyPrefix = "backendtest:"

// Run runs the conformance suite as subtests of t. open is called at the
// start of every subtest, on that subtest's t, and returns the node to
// test; it may start a fresh node each time (and stop it in t.Cleanup),
// or return the same shared node: every subtest uses keys of its own (see
// KeyPrefix). Subtests run one after the other, never in parallel, so a
// Stall of a shared node affects no other subtest. open may call t.Skip
// or t.Fatal.
//
// A check that waits for a key to be held and finds it free, when more
// than a TTL of real time passed since it set the key (a slow machine, a
// node far away), cannot tell a wrong TTL from a late round trip: it runs
// again with fresh keys, up to three times, and fails only then.
//
// Every goroutine the suite starts has ended when Run returns, unless the
// adapter left a call hanging for more than a minute after it was
// reported (the test has failed then).
func Run(t *testing.T, open func(t *testing.T) Target) {
	t.Helper()
	if open == nil {
		t.Fatal("backendtest.Run: open is nil")
	}
	groups := []struct {
		name   string
		checks []check
	}{
		{"Name", nameChecks},
		{"Acquire", acquireChecks},
		{"Release", releaseChecks},
		{"Extend", extendChecks},
		{"Fencer", fencerChecks},
		{"Notifier", notifierChecks},
		{"MultiLocker", multiChecks},
		{"Peeker", peekerChecks},
		{"RWLocker", rwChecks},
		{"Transferrer", transferChecks},
		{"Starter", starterChecks},
		{"FairStarter", fairStarterChecks},
		{"FairQueuer", fairChecks},
		{"Context", contextChecks},
		{"Concurrency", concurrencyChecks},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.checks {
				t.Run(c.name, func(t *testing.T) {
					tg := open(t)
					if tg.Backend == nil {
						t.Fatal("open returned a Target without a Backend")
					}
					c.run(newNode(t, tg))
				})
			}
		})
	}
}

// check is one leaf subtest.
type check struct {
	name string
	run  func(n *node)
}

// node wraps a Target for one subtest: calls that must succeed fail the
// subtest (t.Fatalf) on error, each bounded by CallTimeout.
type node struct {
	t   *testing.T
	b   redlock.Backend
	tg  Target
	ttl time.Duration // for keys whose expiry is checked
	pad time.Duration // waited past a TTL for a key to be gone

	attempts int64 // the fair checks' AcquireFair calls, numbered in order
}

func newNode(t *testing.T, tg Target) *node {
	ttl := tg.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &node{t: t, b: tg.Backend, tg: tg, ttl: ttl, pad: max(ttl/2, time.Millisecond)}
}

// key returns a fresh key for this subtest.
func (n *node) key() string {
	name := strings.Map(func(r rune) rune {
		switch r {
		case '{', '}', ' ':
			return '_'
		}
		return r
	}, n.t.Name())
	return KeyPrefix + "{" + name + ":" + random() + "}"
}

// token returns a fresh token.
func token() string { return "tok-" + random() }

func random() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ctx returns the context of one ordinary call.
func (n *node) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(n.t.Context(), CallTimeout)
}

// elapse lets d pass on the node's clock.
func (n *node) elapse(d time.Duration) {
	if n.tg.Elapse != nil {
		n.tg.Elapse(d)
		return
	}
	time.Sleep(d)
}

// expire lets a key set with TTL ttl expire.
func (n *node) expire(ttl time.Duration) { n.elapse(ttl + n.pad) }

func (n *node) acquire(key, tok string, ttl time.Duration) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.b.Acquire(ctx, key, tok, ttl)
	if err != nil {
		n.t.Fatalf("Acquire(%q, %q, %v): unexpected error: %v", key, tok, ttl, err)
	}
	return ok
}

func (n *node) release(key, tok string, announce bool) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.b.Release(ctx, key, tok, announce)
	if err != nil {
		n.t.Fatalf("Release(%q, %q, %v): unexpected error: %v", key, tok, announce, err)
	}
	return ok
}

func (n *node) extend(key, tok string, ttl time.Duration) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.b.Extend(ctx, key, tok, ttl)
	if err != nil {
		n.t.Fatalf("Extend(%q, %q, %v): unexpected error: %v", key, tok, ttl, err)
	}
	return ok
}

// mustAcquire sets a key that the subtest knows to be free.
func (n *node) mustAcquire(key, tok string, ttl time.Duration) {
	n.t.Helper()
	if !n.acquire(key, tok, ttl) {
		n.t.Fatalf("Acquire of a free key %q reported false, want true", key)
	}
}

// mustRelease releases a key the subtest holds.
func (n *node) mustRelease(key, tok string) {
	n.t.Helper()
	if !n.release(key, tok, false) {
		n.t.Fatalf("Release(%q) with the token that holds the key reported false, want true", key)
	}
}

// isHeld reports whether key exists on the node: whether an Acquire with
// a fresh token is refused. A key found free is released again.
func (n *node) isHeld(key string) bool {
	n.t.Helper()
	tok := token()
	if !n.acquire(key, tok, longTTL) {
		return true
	}
	n.mustRelease(key, tok)
	return false
}

// tooSlow reports whether more than ttl of real time passed since start:
// a key set after start may have expired on a real clock, so finding it
// free proves nothing.
func tooSlow(start time.Time, ttl time.Duration) bool { return time.Since(start) >= ttl }

// retrySlow runs attempt up to tries times, while it reports that its
// round trips did not fit in the TTL (slow); it fails the subtest with
// msg after the last such attempt.
func (n *node) retrySlow(attempt func() (slow bool), msg string) {
	n.t.Helper()
	for range tries {
		if !attempt() {
			return
		}
	}
	n.t.Fatalf("%s; each of %d attempts took more than the TTL (%v) of real time, so the key may have expired on its own: raise Target.TTL for this node",
		msg, tries, n.ttl)
}

// pending is a call running in a goroutine of its own, so the suite can
// bound how long it waits for it.
type pending struct{ done chan struct{} }

func async(f func()) *pending {
	p := &pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		f()
	}()
	return p
}

// within reports whether the call has returned, waiting at most d.
func (p *pending) within(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// reap waits for a call already reported as late, so that its goroutine
// does not outlive the subtest, for at most reapBound.
func (p *pending) reap(t *testing.T, what string) {
	t.Helper()
	if !p.within(reapBound) {
		t.Errorf("%s still had not returned %v after it was reported; abandoning its goroutine", what, reapBound)
	}
}

// recorder records the calls of a Notify callback. The callback never
// touches the testing.T (it may be called after the subtest ended by a
// broken adapter), never blocks, and is safe for concurrent use.
type recorder struct {
	mu        sync.Mutex
	payloads  []string
	stopped   bool     // stop has returned
	afterStop []string // calls made after stop returned: a violation
	signal    chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (r *recorder) released(payload string) {
	r.mu.Lock()
	if r.stopped {
		r.afterStop = append(r.afterStop, payload)
	} else {
		r.payloads = append(r.payloads, payload)
	}
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// count returns how many calls carried payload.
func (r *recorder) count(payload string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.payloads {
		if p == payload {
			n++
		}
	}
	return n
}

// waitFor waits at most d for a call with payload and reports whether
// one came.
func (r *recorder) waitFor(payload string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		if r.count(payload) > 0 {
			return true
		}
		select {
		case <-r.signal:
		case <-timer.C:
			return r.count(payload) > 0
		}
	}
}

// markStopped records that stop has returned.
func (r *recorder) markStopped() {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
}

func (r *recorder) callsAfterStop() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.afterStop...)
}
