package backendtest

import (
	"github.com/quorumlock/redlock"
)

// peeker returns the node's Peeker, or skips the subtest.
func (n *node) peeker() redlock.Peeker {
	n.t.Helper()
	p, ok := n.b.(redlock.Peeker)
	if !ok {
		n.t.Skipf("%T does not implement redlock.Peeker (optional; NewElection refuses such a node)", n.b)
	}
	return p
}

func (n *node) peek(key string) (string, int64) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	tok, fence, err := n.peeker().Peek(ctx, key)
	if err != nil {
		n.t.Fatalf("Peek(%q): unexpected error: %v", key, err)
	}
	return tok, fence
}

// wantPeek fails the subtest unless Peek of key answers (tok, fence).
func (n *node) wantPeek(key, tok string, fence int64, when string) {
	n.t.Helper()
	gotTok, gotFence := n.peek(key)
	if gotTok != tok || gotFence != fence {
		n.t.Fatalf("Peek %s returned (%q, %d), want (%q, %d): Peek must read the key's token and its fence counter (key + \":fence\")",
			when, gotTok, gotFence, tok, fence)
	}
}

var peekerChecks = []check{
	{"Free", func(n *node) {
		key := n.key()
		n.wantPeek(key, "", 0, "of a key never set")
		if n.isHeld(key) {
			n.t.Fatal("after Peek of a free key the key is held: Peek must change nothing")
		}
	}},
	{"Held", func(n *node) {
		n.peeker()
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, longTTL)
		n.wantPeek(key, tok, 0, "of a key set by Acquire, never fenced")
		if !n.release(key, tok, false) {
			n.t.Fatal("Release after Peek reported false: Peek must leave the key as it was")
		}
	}},
	// The counter is read beside the token: after a fenced acquisition,
	// a raise, and a release (the counter outlives the key).
	{"Fence", func(n *node) {
		n.peeker()
		key, tok := n.key(), token()
		f := n.mustFence(key, tok, longTTL)
		n.wantPeek(key, tok, f, "of a key set by AcquireFenced")
		if !n.raiseFence(key, tok, f+5) {
			n.t.Fatal("RaiseFence with the token that holds the key reported false, want true")
		}
		n.wantPeek(key, tok, f+5, "after RaiseFence")
		n.mustRelease(key, tok)
		n.wantPeek(key, "", f+5, "of a released key (its counter never expires)")
	}},
	{"Expired", func(n *node) {
		n.peeker()
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, n.ttl)
		n.expire(n.ttl)
		n.wantPeek(key, "", 0, "of a key whose TTL ran out")
	}},
}
