package backendtest

import (
	"time"

	"github.com/quorumlock/redlock"
)

// The checks of the optional redlock.RWLocker capability: read-write
// locks. They skip on a Backend that does not implement it.

// rw returns the node's RWLocker, or skips the subtest.
func (n *node) rw() redlock.RWLocker {
	n.t.Helper()
	r, ok := n.b.(redlock.RWLocker)
	if !ok {
		n.t.Skipf("%T does not implement redlock.RWLocker (optional; RLock and WLock refuse such a node)", n.b)
	}
	return r
}

func (n *node) acquireRead(key, tok string, ttl time.Duration) (bool, int64) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, f, err := n.rw().AcquireRead(ctx, key, tok, ttl)
	if err != nil {
		n.t.Fatalf("AcquireRead(%q, %q, %v): unexpected error: %v", key, tok, ttl, err)
	}
	return ok, f
}

func (n *node) acquireWrite(key, tok string, mark time.Duration, fenced bool) (bool, int64) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, f, err := n.rw().AcquireWrite(ctx, key, tok, longTTL, mark, fenced)
	if err != nil {
		n.t.Fatalf("AcquireWrite(%q, %q): unexpected error: %v", key, tok, err)
	}
	return ok, f
}

func (n *node) releaseRead(key, tok string) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.rw().ReleaseRead(ctx, key, tok, false)
	if err != nil {
		n.t.Fatalf("ReleaseRead(%q, %q): unexpected error: %v", key, tok, err)
	}
	return ok
}

func (n *node) extendRead(key, tok string) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.rw().ExtendRead(ctx, key, tok, longTTL)
	if err != nil {
		n.t.Fatalf("ExtendRead(%q, %q): unexpected error: %v", key, tok, err)
	}
	return ok
}

var rwChecks = []check{
	// Readers share the key and keep out writers and mutexes, until the
	// last of them leaves.
	{"ReadersShare", func(n *node) {
		n.rw()
		key, r1, r2 := n.key(), token(), token()
		for _, r := range []string{r1, r2} {
			if ok, _ := n.acquireRead(key, r, longTTL); !ok {
				n.t.Fatal("AcquireRead of a key that only readers hold reported false, want true")
			}
		}
		if n.acquire(key, token(), longTTL) {
			n.t.Fatal("Acquire (a mutex) while readers hold reported true, want false")
		}
		if ok, _ := n.acquireWrite(key, token(), 0, false); ok {
			n.t.Fatal("AcquireWrite while readers hold reported true, want false")
		}
		if !n.releaseRead(key, r1) || !n.extendRead(key, r2) {
			n.t.Fatal("ReleaseRead or ExtendRead of a live reader reported false, want true")
		}
		if n.releaseRead(key, r1) {
			n.t.Fatal("a second ReleaseRead of a reader reported true, want false")
		}
		if n.acquire(key, token(), longTTL) {
			n.t.Fatal("Acquire while one reader still holds reported true, want false")
		}
		if !n.releaseRead(key, r2) {
			n.t.Fatal("ReleaseRead of the last reader reported false, want true")
		}
		if n.isHeld(key) {
			n.t.Fatal("the last reader's release left the key: a writer could never take it")
		}
	}},
	// A refused writer's mark refuses new readers; the writer gets the
	// key once the readers left, and refuses readers while it holds.
	{"WriterPreference", func(n *node) {
		n.rw()
		key, r1, w := n.key(), token(), token()
		if ok, _ := n.acquireRead(key, r1, longTTL); !ok {
			n.t.Fatal("AcquireRead of a free key reported false, want true")
		}
		if ok, _ := n.acquireWrite(key, w, longTTL, false); ok {
			n.t.Fatal("AcquireWrite while a reader holds reported true, want false")
		}
		if ok, _ := n.acquireRead(key, token(), longTTL); ok {
			n.t.Fatal("AcquireRead while a writer waits (its mark is set) reported true, want false")
		}
		n.releaseRead(key, r1)
		if ok, _ := n.acquireWrite(key, w, longTTL, false); !ok {
			n.t.Fatal("AcquireWrite once the readers left reported false, want true")
		}
		if ok, _ := n.acquireRead(key, token(), longTTL); ok {
			n.t.Fatal("AcquireRead while a writer holds reported true, want false")
		}
		n.mustRelease(key, w)
		if ok, _ := n.acquireRead(key, token(), longTTL); !ok {
			n.t.Fatal("AcquireRead after the writer released (its mark deleted) reported false, want true")
		}
	}},
	// A reader that never releases stops holding at its TTL.
	{"ReaderExpires", func(n *node) {
		n.rw()
		key := n.key()
		if ok, _ := n.acquireRead(key, token(), n.ttl); !ok {
			n.t.Fatal("AcquireRead of a free key reported false, want true")
		}
		n.expire(n.ttl)
		if ok, _ := n.acquireWrite(key, token(), 0, false); !ok {
			n.t.Fatalf("AcquireWrite after the only reader's TTL (%v) reported false, want true", n.ttl)
		}
	}},
	// A fenced writer increments the key's counter (shared with
	// AcquireFenced); a reader reads it unchanged.
	{"Fences", func(n *node) {
		n.rw()
		key, t0, w := n.key(), token(), token()
		f0 := n.mustFence(key, t0, longTTL)
		n.mustRelease(key, t0)
		ok, f1 := n.acquireWrite(key, w, 0, true)
		if !ok || f1 <= f0 {
			n.t.Fatalf("fenced AcquireWrite after AcquireFenced's %d: %v, fence %d, want true and more than %d (one counter per key)", f0, ok, f1, f0)
		}
		n.mustRelease(key, w)
		ok, fr := n.acquireRead(key, token(), longTTL)
		if !ok || fr != f1 {
			n.t.Fatalf("AcquireRead after a writer with fence %d: %v, fence %d, want true and %d", f1, ok, fr, f1)
		}
	}},
}
