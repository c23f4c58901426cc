package backendtest

import (
	"fmt"
	"time"

	"github.com/quorumlock/redlock"
)

// The checks of the optional redlock.MultiLocker capability: a set of
// keys, all or nothing. They skip on a Backend that does not implement it.

// multi returns the node's MultiLocker, or skips the subtest.
func (n *node) multi() redlock.MultiLocker {
	n.t.Helper()
	m, ok := n.b.(redlock.MultiLocker)
	if !ok {
		n.t.Skipf("%T does not implement redlock.MultiLocker (optional; LockMany refuses such a node)", n.b)
	}
	return m
}

// keySet returns size fresh keys for this subtest, sorted, sharing one
// hash tag (a Redis Cluster node holds a set in one slot).
func (n *node) keySet(size int) []string {
	base := n.key()
	keys := make([]string, size)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", base, i)
	}
	return keys
}

func (n *node) acquireMany(keys []string, tok string, ttl time.Duration) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.multi().AcquireMany(ctx, keys, tok, ttl)
	if err != nil {
		n.t.Fatalf("AcquireMany(%q, %q, %v): unexpected error: %v", keys, tok, ttl, err)
	}
	return ok
}

func (n *node) acquireManyFenced(keys []string, tok string, ttl time.Duration) (bool, []int64) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	fences := make([]int64, len(keys))
	ok, err := n.multi().AcquireManyFenced(ctx, keys, tok, ttl, fences)
	if err != nil {
		n.t.Fatalf("AcquireManyFenced(%q, %q, %v): unexpected error: %v", keys, tok, ttl, err)
	}
	return ok, fences
}

func (n *node) releaseMany(keys []string, tok string, announce bool) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.multi().ReleaseMany(ctx, keys, tok, announce)
	if err != nil {
		n.t.Fatalf("ReleaseMany(%q, %q, %v): unexpected error: %v", keys, tok, announce, err)
	}
	return ok
}

func (n *node) extendMany(keys []string, tok string, ttl time.Duration) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.multi().ExtendMany(ctx, keys, tok, ttl)
	if err != nil {
		n.t.Fatalf("ExtendMany(%q, %q, %v): unexpected error: %v", keys, tok, ttl, err)
	}
	return ok
}

func (n *node) raiseFences(keys []string, tok string, fences []int64) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.multi().RaiseFences(ctx, keys, tok, fences)
	if err != nil {
		n.t.Fatalf("RaiseFences(%q, %q, %v): unexpected error: %v", keys, tok, fences, err)
	}
	return ok
}

// heldKeys returns which of keys are held.
func (n *node) heldKeys(keys []string) []bool {
	n.t.Helper()
	held := make([]bool, len(keys))
	for i, k := range keys {
		held[i] = n.isHeld(k)
	}
	return held
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}

func anyTrue(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

var multiChecks = []check{
	// A set with one key held by someone else sets none of its keys; a
	// free set sets every key, and each then refuses a single Acquire.
	{"AllOrNothing", func(n *node) {
		n.multi()
		keys, other := n.keySet(3), token()
		n.mustAcquire(keys[1], other, longTTL)
		if n.acquireMany(keys, token(), longTTL) {
			n.t.Fatal("AcquireMany of a set with a key held by another token reported true, want false")
		}
		n.mustRelease(keys[1], other)
		if held := n.heldKeys(keys); anyTrue(held) {
			n.t.Fatalf("a refused AcquireMany left keys set (held: %v): it must set every key or none", held)
		}
		tok := token()
		if !n.acquireMany(keys, tok, longTTL) {
			n.t.Fatal("AcquireMany of a free set reported false, want true")
		}
		if n.acquireMany(keys[1:], token(), longTTL) {
			n.t.Fatal("AcquireMany of a set overlapping a held set reported true, want false")
		}
		if held := n.heldKeys(keys); !allTrue(held) {
			n.t.Fatalf("after AcquireMany reported true, held: %v, want every key", held)
		}
		if !n.releaseMany(keys, tok, false) {
			n.t.Fatal("ReleaseMany with the token that holds the set reported false, want true")
		}
		if held := n.heldKeys(keys); anyTrue(held) {
			n.t.Fatalf("after ReleaseMany, held: %v, want no key", held)
		}
	}},
	{"ExpiresPerKey", func(n *node) {
		n.multi()
		var keys []string
		var held []bool
		n.retrySlow(func() bool {
			keys = n.keySet(2)
			start := time.Now()
			if !n.acquireMany(keys, token(), n.ttl) {
				n.t.Fatal("AcquireMany of a free set reported false, want true")
			}
			held = n.heldKeys(keys)
			return !allTrue(held) && tooSlow(start, n.ttl)
		}, "the set expired before it was checked")
		if !allTrue(held) {
			n.t.Fatalf("a set just acquired with TTL %v: held %v, want every key", n.ttl, held)
		}
		n.expire(n.ttl)
		if held := n.heldKeys(keys); anyTrue(held) {
			n.t.Fatalf("a set past its TTL (%v): held %v, want none: AcquireMany must set the TTL on each key", n.ttl, held)
		}
	}},
	// ReleaseMany deletes only keys holding the token, and reports true
	// only when every key held it.
	{"ReleasePartial", func(n *node) {
		n.multi()
		keys, tok := n.keySet(3), token()
		if !n.acquireMany(keys, tok, longTTL) {
			n.t.Fatal("AcquireMany of a free set reported false, want true")
		}
		if n.releaseMany(keys, token(), false) {
			n.t.Fatal("ReleaseMany with a wrong token reported true, want false")
		}
		if held := n.heldKeys(keys); !allTrue(held) {
			n.t.Fatalf("ReleaseMany with a wrong token deleted keys (held: %v)", held)
		}
		n.mustRelease(keys[0], tok) // as if it had expired
		other := token()
		n.mustAcquire(keys[0], other, longTTL)
		if n.releaseMany(keys, tok, false) {
			n.t.Fatal("ReleaseMany of a set whose first key another token holds reported true, want false: the set was no longer held")
		}
		if held := n.heldKeys(keys); !held[0] || held[1] || held[2] {
			n.t.Fatalf("after ReleaseMany of a partly taken set, held %v, want [true false false]: it deletes exactly the keys holding its token", held)
		}
		n.mustRelease(keys[0], other)
	}},
	{"ReleaseAnnouncesEachKey", func(n *node) {
		n.multi()
		keys, tok := n.keySet(2), token()
		subs := []*subscription{n.notify(keys[0]), n.notify(keys[1])}
		if !n.acquireMany(keys, tok, longTTL) || !n.releaseMany(keys, tok, true) {
			n.t.Fatal("AcquireMany then ReleaseMany of a free set did not both report true")
		}
		for i, s := range subs {
			s.expect(tok, fmt.Sprintf("ReleaseMany(announce=true) of key %d of the set", i))
		}
	}},
	// ExtendMany is all or nothing: a set of which a key no longer holds
	// the token is not extended at all, and no key is re-created.
	{"ExtendAllOrNothing", func(n *node) {
		n.multi()
		var keys []string
		n.retrySlow(func() bool {
			keys = n.keySet(2)
			tok := token()
			start := time.Now()
			if !n.acquireMany(keys, tok, n.ttl) {
				n.t.Fatal("AcquireMany of a free set reported false, want true")
			}
			released := n.release(keys[0], tok, false) // as if it had expired
			extended := n.extendMany(keys, tok, longTTL)
			if tooSlow(start, n.ttl) {
				return true
			}
			if !released {
				n.t.Fatal("Release of one key of a set, with the set's token, reported false, want true")
			}
			if extended {
				n.t.Fatal("ExtendMany of a set whose first key is gone reported true, want false")
			}
			return false
		}, "the set expired before ExtendMany")
		if n.isHeld(keys[0]) {
			n.t.Fatal("ExtendMany re-created a released key")
		}
		n.expire(n.ttl)
		if n.isHeld(keys[1]) {
			n.t.Fatalf("the second key outlived its TTL (%v): a refused ExtendMany must change no key", n.ttl)
		}
	}},
	// Each key's fence counter is the single-key one: AcquireManyFenced
	// increments each once, a resend answers the same, a refusal moves
	// none, and RaiseFences raises each, only with the token.
	{"Fences", func(n *node) {
		n.multi()
		n.fencer()
		keys := n.keySet(2)
		before := n.nextFence(keys[1])
		tok := token()
		ok, fences := n.acquireManyFenced(keys, tok, longTTL)
		if !ok || fences[0] != 1 || fences[1] != before+1 {
			n.t.Fatalf("AcquireManyFenced of a free set returned (%v, %v), want (true, [1 %d]): each key's counter is incremented once", ok, fences, before+1)
		}
		if ok, again := n.acquireManyFenced(keys, tok, longTTL); !ok || again[0] != fences[0] || again[1] != fences[1] {
			n.t.Fatalf("AcquireManyFenced resent by the holder returned (%v, %v), want (true, %v)", ok, again, fences)
		}
		if ok, _ := n.acquireManyFenced(keys, token(), longTTL); ok {
			n.t.Fatal("AcquireManyFenced of a held set with another token reported true, want false")
		}
		if n.raiseFences(keys, token(), []int64{100, 100}) {
			n.t.Fatal("RaiseFences with a wrong token reported true, want false")
		}
		if !n.raiseFences(keys, tok, []int64{50, 1}) {
			n.t.Fatal("RaiseFences with the token that holds the set reported false, want true")
		}
		if !n.releaseMany(keys, tok, false) {
			n.t.Fatal("ReleaseMany with the token that holds the set reported false, want true")
		}
		if a, b := n.nextFence(keys[0]), n.nextFence(keys[1]); a != 51 || b != fences[1]+1 {
			n.t.Fatalf("after RaiseFences([50 1]) from [1 %d], the next holders got %d and %d, want 51 and %d: raise each to at least its fence, never lower", fences[1], a, b, fences[1]+1)
		}
	}},
}
