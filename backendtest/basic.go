package backendtest

import "time"

var nameChecks = []check{
	{"NonEmptyStable", func(n *node) {
		a, b := n.b.Name(), n.b.Name()
		if a == "" {
			n.t.Fatal(`Name() = "": it must identify the node in errors and logs`)
		}
		if a != b {
			n.t.Fatalf("Name() changed between two calls: %q, then %q", a, b)
		}
	}},
}

var acquireChecks = []check{
	{"SetsFreeKey", func(n *node) {
		key, tok := n.key(), token()
		if !n.acquire(key, tok, longTTL) {
			n.t.Fatal("Acquire of a free key reported false, want true")
		}
		if !n.isHeld(key) {
			n.t.Fatal("after Acquire reported true, the key is free: Acquire must set it")
		}
		n.mustRelease(key, tok)
	}},
	{"RefusesHeldKey", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, longTTL)
		if n.acquire(key, token(), longTTL) {
			n.t.Fatal("Acquire with a second token of a held key reported true, want false (SET NX)")
		}
		if !n.release(key, tok, false) {
			n.t.Fatal("the refused Acquire replaced the holder's token: Release by the holder reported false")
		}
	}},
	// A resent SET NX (a retry after a lost reply) finds the key it set
	// itself and answers false: the contract is SET NX, not "true if the
	// key holds this token". The lockers never send the same token twice
	// and rely on that answer being false (see redlock.Backend).
	{"SameTokenWhileHeld", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, longTTL)
		if n.acquire(key, tok, longTTL) {
			n.t.Fatal("Acquire with the token that already holds the key reported true, want false: Acquire is SET NX, which refuses any existing key")
		}
		n.mustRelease(key, tok)
	}},
	{"TTLExpires", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, n.ttl)
		n.expire(n.ttl)
		if !n.acquire(key, token(), longTTL) {
			n.t.Fatalf("a key acquired with TTL %v is still held after %v: Acquire must set the TTL (PX, in milliseconds)", n.ttl, n.ttl+n.pad)
		}
	}},
	{"TTLNotCutShort", func(n *node) {
		n.retrySlow(func() bool {
			key, tok := n.key(), token()
			start := time.Now()
			n.mustAcquire(key, tok, n.ttl)
			n.elapse(n.ttl / 2)
			if n.isHeld(key) {
				// Held at half the TTL: the check passed. The clean-up
				// release may find the key already expired when the
				// machine was slow enough to spend the other half.
				if !n.release(key, tok, false) && !tooSlow(start, n.ttl) {
					n.t.Fatalf("Release with the token that holds the key reported false, want true")
				}
				return false
			}
			if !tooSlow(start, n.ttl) {
				n.t.Fatalf("a key acquired with TTL %v is gone after %v: Acquire must set the TTL it is given (PX, in milliseconds)", n.ttl, n.ttl/2)
			}
			return true
		}, "a key acquired with a TTL was gone after half of it")
	}},
}

var releaseChecks = []check{
	{"RightToken", func(n *node) {
		for _, announce := range []bool{false, true} {
			key, tok := n.key(), token()
			n.mustAcquire(key, tok, longTTL)
			if !n.release(key, tok, announce) {
				n.t.Fatalf("Release(announce=%v) with the token that holds the key reported false, want true", announce)
			}
			if n.isHeld(key) {
				n.t.Fatalf("Release(announce=%v) reported true but the key is still held: it must delete the key", announce)
			}
		}
	}},
	{"WrongToken", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, longTTL)
		for _, announce := range []bool{false, true} {
			if n.release(key, token(), announce) {
				n.t.Fatalf("Release(announce=%v) with a wrong token reported true, want false: Release must delete the key only if it holds the token (release.lua)", announce)
			}
			if !n.isHeld(key) {
				n.t.Fatalf("Release(announce=%v) with a wrong token deleted the key: Release must delete the key only if it holds the token (release.lua)", announce)
			}
		}
		n.mustRelease(key, tok)
	}},
	{"FreeKey", func(n *node) {
		key := n.key()
		if n.release(key, token(), true) {
			n.t.Fatal("Release of a key that was never set reported true, want false")
		}
		if n.isHeld(key) {
			n.t.Fatal("Release of a key that was never set created it")
		}
	}},
	{"ExpiredKey", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, n.ttl)
		n.expire(n.ttl)
		if n.release(key, tok, true) {
			n.t.Fatal("Release of an expired key reported true, want false")
		}
	}},
	// A Release sent twice (a retry after a lost reply) must answer false
	// the second time and, above all, must not delete the key of whoever
	// acquired it in between.
	{"Resent", func(n *node) {
		key, a, b := n.key(), token(), token()
		n.mustAcquire(key, a, longTTL)
		if !n.release(key, a, true) {
			n.t.Fatal("Release by the holder reported false, want true")
		}
		n.mustAcquire(key, b, longTTL)
		if n.release(key, a, true) {
			n.t.Fatal("a second Release with the first holder's token reported true, want false: the key holds the next holder's token")
		}
		if !n.isHeld(key) {
			n.t.Fatal("a second Release with the first holder's token deleted the next holder's key: Release must delete the key only if it holds the token (release.lua)")
		}
		if !n.release(key, b, false) {
			n.t.Fatal("the next holder's Release reported false after a stale Release: its key was changed")
		}
	}},
}

var extendChecks = []check{
	{"RightToken", func(n *node) {
		n.retrySlow(func() bool {
			key, tok := n.key(), token()
			start := time.Now()
			n.mustAcquire(key, tok, n.ttl)
			if !n.extend(key, tok, 10*n.ttl) {
				if tooSlow(start, n.ttl) {
					return true
				}
				n.t.Fatal("Extend with the token that holds the key reported false, want true")
			}
			extended := time.Now()
			n.expire(n.ttl)
			if !n.isHeld(key) {
				if tooSlow(extended, 10*n.ttl) {
					return true
				}
				n.t.Fatalf("Extend to %v reported true, but the key was gone %v after it was set with TTL %v: Extend must reset the TTL (extend.lua)",
					10*n.ttl, n.ttl+n.pad, n.ttl)
			}
			n.mustRelease(key, tok)
			return false
		}, "Extend did not keep a key past its first TTL")
	}},
	{"WrongToken", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, n.ttl)
		if n.extend(key, token(), 100*n.ttl) {
			n.t.Fatal("Extend with a wrong token reported true, want false: Extend must act only if the key holds the token (extend.lua)")
		}
		n.expire(n.ttl)
		if n.isHeld(key) {
			n.t.Fatalf("Extend with a wrong token reported false but changed the holder's TTL: the key, set with TTL %v, is still held after %v", n.ttl, n.ttl+n.pad)
		}
	}},
	// Extend is compare-and-PEXPIRE: a renewal that arrives after the key
	// expired must not bring it back, or a holder that lost its lock
	// would silently get it again over the head of the next one.
	{"NeverRecreates", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, n.ttl)
		n.expire(n.ttl)
		if n.extend(key, tok, longTTL) {
			n.t.Fatal("Extend of an expired key reported true, want false: Extend must never create the key (extend.lua)")
		}
		if n.isHeld(key) {
			n.t.Fatal("Extend of an expired key re-created it: Extend must never create the key (extend.lua)")
		}
		never := n.key()
		if n.extend(never, tok, longTTL) {
			n.t.Fatal("Extend of a key that was never set reported true, want false")
		}
		if n.isHeld(never) {
			n.t.Fatal("Extend of a key that was never set created it: Extend must never create the key (extend.lua)")
		}
	}},
}
