package backendtest

import (
	"time"

	"github.com/quorumlock/redlock"
)

// fencer returns the node's Fencer, or skips the subtest.
func (n *node) fencer() redlock.Fencer {
	n.t.Helper()
	f, ok := n.b.(redlock.Fencer)
	if !ok {
		n.t.Skipf("%T does not implement redlock.Fencer (optional; WithFencing refuses such a node)", n.b)
	}
	return f
}

func (n *node) acquireFenced(key, tok string, ttl time.Duration) (bool, int64) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, fence, err := n.fencer().AcquireFenced(ctx, key, tok, ttl)
	if err != nil {
		n.t.Fatalf("AcquireFenced(%q, %q, %v): unexpected error: %v", key, tok, ttl, err)
	}
	return ok, fence
}

func (n *node) raiseFence(key, tok string, fence int64) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.fencer().RaiseFence(ctx, key, tok, fence)
	if err != nil {
		n.t.Fatalf("RaiseFence(%q, %q, %d): unexpected error: %v", key, tok, fence, err)
	}
	return ok
}

// mustFence acquires a free key fenced and returns the counter.
func (n *node) mustFence(key, tok string, ttl time.Duration) int64 {
	n.t.Helper()
	ok, fence := n.acquireFenced(key, tok, ttl)
	if !ok {
		n.t.Fatalf("AcquireFenced of a free key %q reported ok=false, want true", key)
	}
	if fence < 1 {
		n.t.Fatalf("AcquireFenced of a free key returned counter %d, want at least 1", fence)
	}
	return fence
}

// nextFence acquires and releases key fenced with a fresh token and
// returns the counter it got.
func (n *node) nextFence(key string) int64 {
	n.t.Helper()
	tok := token()
	f := n.mustFence(key, tok, longTTL)
	n.mustRelease(key, tok)
	return f
}

var fencerChecks = []check{
	// Each holder's counter is the previous one plus one: AcquireFenced
	// increments the key's counter (INCR) when, and only when, it sets the
	// key.
	{"Increasing", func(n *node) {
		key := n.key()
		prev := n.nextFence(key)
		for i := range 4 {
			f := n.nextFence(key)
			if f != prev+1 {
				n.t.Fatalf("successive holders of one key got counters %d then %d (holder %d), want %d: AcquireFenced must increment the key's counter each time it sets the key",
					prev, f, i+2, prev+1)
			}
			prev = f
		}
	}},
	{"RefusedWhileHeld", func(n *node) {
		key, tok := n.key(), token()
		f := n.mustFence(key, tok, longTTL)
		if ok, _ := n.acquireFenced(key, token(), longTTL); ok {
			n.t.Fatal("AcquireFenced with a second token of a held key reported ok=true, want false")
		}
		if n.acquire(key, token(), longTTL) {
			n.t.Fatal("Acquire of a key held by AcquireFenced reported true: both must set the same key")
		}
		if !n.extend(key, tok, longTTL) {
			n.t.Fatal("Extend of a key held by AcquireFenced, with its token, reported false: both must set the same key")
		}
		n.mustRelease(key, tok)
		if g := n.nextFence(key); g != f+1 {
			n.t.Fatalf("after refused AcquireFenced calls the next holder got counter %d, want %d: a refused AcquireFenced must not move the counter", g, f+1)
		}
	}},
	// A resent AcquireFenced (a retry after a lost reply) finds its own
	// key and answers ok=true with the counter it was given, without
	// incrementing it again (acquire_fenced.lua).
	{"ResentIsIdempotent", func(n *node) {
		key, tok := n.key(), token()
		f := n.mustFence(key, tok, longTTL)
		ok, g := n.acquireFenced(key, tok, longTTL)
		if !ok || g != f {
			n.t.Fatalf("AcquireFenced resent with the token that holds the key returned (ok=%v, %d), want (true, %d): the same call run twice must answer the same (acquire_fenced.lua)", ok, g, f)
		}
		n.mustRelease(key, tok)
		if h := n.nextFence(key); h != f+1 {
			n.t.Fatalf("after a resent AcquireFenced the next holder got counter %d, want %d: the resend must not increment the counter", h, f+1)
		}
	}},
	{"SurvivesExpiry", func(n *node) {
		key, tok := n.key(), token()
		f := n.mustFence(key, tok, n.ttl)
		n.expire(n.ttl)
		ok, g := n.acquireFenced(key, token(), longTTL)
		if !ok {
			n.t.Fatalf("AcquireFenced of a key whose TTL (%v) ran out reported ok=false: the key must expire", n.ttl)
		}
		if g != f+1 {
			n.t.Fatalf("after the key expired the next holder got counter %d, want %d: the counter must never expire or reset", g, f+1)
		}
	}},
	{"RaiseWhileHeld", func(n *node) {
		key, tok := n.key(), token()
		f := n.mustFence(key, tok, longTTL)
		target := f + 10
		if !n.raiseFence(key, tok, target) {
			n.t.Fatal("RaiseFence with the token that holds the key reported false, want true")
		}
		n.mustRelease(key, tok)
		g := n.nextFence(key)
		if g <= target {
			n.t.Fatalf("after RaiseFence(%d) the next holder got counter %d, want more than %d: RaiseFence must set the counter to at least its argument", target, g, target)
		}
	}},
	{"RaiseNeverLowers", func(n *node) {
		key := n.key()
		n.nextFence(key)
		n.nextFence(key)
		tok := token()
		f := n.mustFence(key, tok, longTTL) // at least 3
		if !n.raiseFence(key, tok, 1) {
			n.t.Fatal("RaiseFence with the token that holds the key reported false, want true (even when the counter is already higher)")
		}
		n.mustRelease(key, tok)
		if g := n.nextFence(key); g <= f {
			n.t.Fatalf("after RaiseFence(1) on a counter at %d the next holder got %d: RaiseFence must never lower the counter", f, g)
		}
	}},
	{"RaiseWrongToken", func(n *node) {
		key, tok := n.key(), token()
		f := n.mustFence(key, tok, longTTL)
		if n.raiseFence(key, token(), f+1000) {
			n.t.Fatal("RaiseFence with a wrong token reported true, want false: it must act only while the key holds the token (fence.lua)")
		}
		n.mustRelease(key, tok)
		if n.raiseFence(key, tok, f+1000) {
			n.t.Fatal("RaiseFence of a released key reported true, want false: it must act only while the key holds the token (fence.lua)")
		}
		if g := n.nextFence(key); g != f+1 {
			n.t.Fatalf("after refused RaiseFence(%d) calls the next holder got counter %d, want %d: a refused RaiseFence must leave the counter alone", f+1000, g, f+1)
		}
	}},
	{"IndependentKeys", func(n *node) {
		a, b := n.key(), n.key()
		fb := n.nextFence(b)
		for range 3 {
			n.nextFence(a)
		}
		if g := n.nextFence(b); g != fb+1 {
			n.t.Fatalf("key B's counter went from %d to %d while only key A was acquired in between, want %d: each key has a counter of its own", fb, g, fb+1)
		}
	}},
}
