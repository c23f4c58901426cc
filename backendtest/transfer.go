package backendtest

import (
	"errors"
	"time"

	"github.com/quorumlock/redlock"
)

// transferrer returns the node's Transferrer, or skips the subtest.
func (n *node) transferrer() redlock.Transferrer {
	n.t.Helper()
	tr, ok := n.b.(redlock.Transferrer)
	if !ok {
		n.t.Skipf("%T does not implement redlock.Transferrer (optional; Unlock then releases and waiters acquire)", n.b)
	}
	return tr
}

func (n *node) transfer(key, from, to string, ttl time.Duration) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.transferrer().Transfer(ctx, key, from, to, ttl)
	if err != nil {
		n.t.Fatalf("Transfer(%q, %q, %q, %v): unexpected error: %v", key, from, to, ttl, err)
	}
	return ok
}

var transferChecks = []check{
	// The holder hands the key over: the next holder's token holds it,
	// ours no longer does.
	{"Held", func(n *node) {
		n.transferrer()
		key, from, to := n.key(), token(), token()
		n.mustAcquire(key, from, longTTL)
		if !n.transfer(key, from, to, longTTL) {
			n.t.Fatal("Transfer by the holder reported false, want true")
		}
		if n.release(key, from, false) {
			n.t.Fatal("Release with the old token after Transfer reported true: Transfer must replace the token")
		}
		if !n.release(key, to, false) {
			n.t.Fatal("Release with the new token after Transfer reported false: Transfer must set the new token")
		}
	}},
	// Anyone else's token is refused and changes nothing.
	{"NotHolder", func(n *node) {
		n.transferrer()
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		if n.transfer(key, token(), token(), longTTL) {
			n.t.Fatal("Transfer with a token that does not hold the key reported true, want false")
		}
		n.mustRelease(key, holder)
	}},
	// A free key (never set, or expired) is never created.
	{"Free", func(n *node) {
		n.transferrer()
		key := n.key()
		if n.transfer(key, token(), token(), longTTL) {
			n.t.Fatal("Transfer of a free key reported true, want false")
		}
		if n.isHeld(key) {
			n.t.Fatal("Transfer of a free key created it: Transfer must never create the key")
		}
	}},
	// The key lives for the TTL given to Transfer, not the old one.
	{"TTL", func(n *node) {
		n.transferrer()
		key, from, to := n.key(), token(), token()
		n.mustAcquire(key, from, longTTL)
		if !n.transfer(key, from, to, n.ttl) {
			n.t.Fatal("Transfer by the holder reported false, want true")
		}
		n.expire(n.ttl)
		if n.isHeld(key) {
			n.t.Fatalf("the key is still held %v after a Transfer with TTL %v: Transfer must set the TTL it is given", n.ttl+n.pad, n.ttl)
		}
	}},
	// A node that keeps queues (FairQueuer) hands over no key whose queue
	// has a Lock call waiting: it answers ErrWaitersQueued and leaves the
	// key holding our token, which it hands over once the queue is empty.
	{"Queued", func(n *node) {
		tr, fq := n.transferrer(), n.fairQueuer()
		key, from, to, ticket := n.key(), token(), token(), "waiter"
		n.mustAcquire(key, from, longTTL)
		n.mustQueue(key, ticket, 1, longTTL, 0)
		ctx, cancel := n.ctx()
		defer cancel()
		if ok, err := tr.Transfer(ctx, key, from, to, longTTL); ok || !errors.Is(err, redlock.ErrWaitersQueued) {
			n.t.Fatalf("Transfer with a Lock call queued = %v, %v; want false, ErrWaitersQueued", ok, err)
		}
		if err := fq.LeaveQueue(ctx, key, ticket); err != nil {
			n.t.Fatalf("LeaveQueue: %v", err)
		}
		if !n.transfer(key, from, to, longTTL) {
			n.t.Fatal("Transfer by the holder after the queue emptied reported false, want true: ErrWaitersQueued must leave the key holding the old token")
		}
		n.mustRelease(key, to)
	}},
	// Transfer releases nothing, so it announces nothing.
	{"Silent", func(n *node) {
		n.transferrer()
		n.notifier()
		key, from, to := n.key(), token(), token()
		s := n.notify(key)
		n.mustAcquire(key, from, longTTL)
		if !n.transfer(key, from, to, longTTL) {
			n.t.Fatal("Transfer by the holder reported false, want true")
		}
		if s.rec.waitFor(from, Quiet) || s.rec.waitFor(to, Quiet) {
			n.t.Fatal("Transfer called released: the key was never free, nothing may be announced")
		}
		n.mustRelease(key, to)
	}},
}
