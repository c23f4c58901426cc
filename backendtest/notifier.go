package backendtest

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// notifier returns the node's Notifier, or skips the subtest.
func (n *node) notifier() redlock.Notifier {
	n.t.Helper()
	nf, ok := n.b.(redlock.Notifier)
	if !ok {
		n.t.Skipf("%T does not implement redlock.Notifier (optional; waiters then wake at their next delay)", n.b)
	}
	return nf
}

// subscription is one Notify call's subscription.
type subscription struct {
	n    *node
	rec  *recorder
	stop func()
	done bool
}

// notify subscribes to key; the subscription is stopped when the subtest
// ends if the check has not stopped it.
func (n *node) notify(key string) *subscription {
	n.t.Helper()
	nf := n.notifier()
	return n.subscribe("Notify("+key+")", func(ctx context.Context, released func(string)) (func(), error) {
		return nf.Notify(ctx, key, released)
	})
}

// subscribe makes the subscription call (Notify, or FairQueuer's
// NotifyGrants); it is stopped when the subtest ends if the check has not
// stopped it.
func (n *node) subscribe(call string, subscribe func(ctx context.Context, released func(string)) (func(), error)) *subscription {
	n.t.Helper()
	s := &subscription{n: n, rec: newRecorder()}
	ctx, cancel := n.ctx()
	defer cancel()
	stop, err := subscribe(ctx, s.rec.released)
	if err != nil {
		if stop != nil {
			stop()
		}
		n.t.Fatalf("%s: unexpected error: %v", call, err)
	}
	if stop == nil {
		n.t.Fatalf("%s returned a nil stop function and no error", call)
	}
	s.stop = stop
	n.t.Cleanup(s.end)
	return s
}

// end stops the subscription, bounded by PromptBound, and reports
// whether stop returned in time.
func (s *subscription) end() {
	s.n.t.Helper()
	if s.done {
		return
	}
	s.done = true
	p := async(func() {
		s.stop()
		s.rec.markStopped()
	})
	if !p.within(PromptBound) {
		s.n.t.Errorf("stop did not return within %v: it must return promptly", PromptBound)
		p.reap(s.n.t, "stop")
	}
}

// expect fails the subtest unless a call with payload arrives within
// PromptBound.
func (s *subscription) expect(payload, what string) {
	s.n.t.Helper()
	if !s.rec.waitFor(payload, PromptBound) {
		s.n.t.Fatalf("%s: released was not called with the releasing token within %v", what, PromptBound)
	}
}

// cycle acquires key with a fresh token and releases it with
// announce=true, returning the token.
func (n *node) cycle(key string) string {
	n.t.Helper()
	tok := token()
	n.mustAcquire(key, tok, longTTL)
	if !n.release(key, tok, true) {
		n.t.Fatal("Release(announce=true) by the holder reported false, want true")
	}
	return tok
}

var notifierChecks = []check{
	// Notify returns only once the subscription is active, so a release
	// made right after it returns is announced: tried three times, on
	// fresh keys, to give an early return a chance to show.
	{"AnnouncedRelease", func(n *node) {
		for range 3 {
			key := n.key()
			s := n.notify(key)
			tok := n.cycle(key)
			s.expect(tok, "a Release(announce=true) made right after Notify returned")
			s.end()
		}
	}},
	{"UnannouncedRelease", func(n *node) {
		key := n.key()
		s := n.notify(key)
		tok := token()
		n.mustAcquire(key, tok, longTTL)
		if !n.release(key, tok, false) {
			n.t.Fatal("Release(announce=false) by the holder reported false, want true")
		}
		if s.rec.waitFor(tok, Quiet) {
			n.t.Fatal("Release(announce=false) called released with its token: announce=false must publish nothing")
		}
		// The subscription was live all along: an announced release still reaches it.
		s.expect(n.cycle(key), "a Release(announce=true) after an unannounced one")
	}},
	{"FailedRelease", func(n *node) {
		key, tok := n.key(), token()
		s := n.notify(key)
		n.mustAcquire(key, tok, longTTL)
		wrong := token()
		if n.release(key, wrong, true) {
			n.t.Fatal("Release with a wrong token reported true, want false")
		}
		if s.rec.waitFor(wrong, Quiet) {
			n.t.Fatal("a Release(announce=true) that deleted nothing called released: only a release that deleted the key is announced")
		}
		if !n.release(key, tok, true) {
			n.t.Fatal("Release(announce=true) by the holder reported false, want true")
		}
		s.expect(tok, "a Release(announce=true) by the holder")
	}},
	{"OtherKey", func(n *node) {
		key, other := n.key(), n.key()
		s := n.notify(key)
		tok := n.cycle(other)
		if s.rec.waitFor(tok, Quiet) {
			n.t.Fatal("the release of another key called released: a subscription hears only its own key's releases")
		}
		s.expect(n.cycle(key), "a Release(announce=true) of the subscribed key")
	}},
	{"Stop", func(n *node) {
		key := n.key()
		s := n.notify(key)
		s.expect(n.cycle(key), "a Release(announce=true) before stop")
		s.end()
		n.cycle(key)
		time.Sleep(Quiet) // bounded: a call later than that is not seen
		if calls := s.rec.callsAfterStop(); len(calls) > 0 {
			n.t.Fatalf("released was called after stop returned, with %q: once stop returns no call may follow", calls)
		}
	}},
	{"SeveralSubscribers", func(n *node) {
		key := n.key()
		subs := []*subscription{n.notify(key), n.notify(key), n.notify(key)}
		tok := n.cycle(key)
		for i, s := range subs {
			s.expect(tok, "subscriber "+string(rune('1'+i))+" of 3 on one key")
		}
		subs[0].end()
		tok = n.cycle(key)
		for i, s := range subs[1:] {
			s.expect(tok, "subscriber "+string(rune('2'+i))+" of 3, after subscriber 1 stopped")
		}
		if calls := subs[0].rec.callsAfterStop(); len(calls) > 0 {
			n.t.Fatalf("the stopped subscriber was called with %q after its stop returned", calls)
		}
	}},
}

// notifyCall runs Notify with ctx and stops a subscription it may return.
func notifyCall(ctx context.Context, nf redlock.Notifier, key string) error {
	stop, err := nf.Notify(ctx, key, func(string) {})
	if stop != nil {
		stop()
	}
	return err
}
