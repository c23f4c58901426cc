package backendtest

import (
	"context"
	"time"

	"github.com/quorumlock/redlock"
)

// fairQueuer returns the node's FairQueuer, or skips the subtest.
func (n *node) fairQueuer() redlock.FairQueuer {
	n.t.Helper()
	fq, ok := n.b.(redlock.FairQueuer)
	if !ok {
		n.t.Skipf("%T does not implement redlock.FairQueuer (optional; WithFairness then refuses the node)", n.b)
	}
	return fq
}

// fair makes one AcquireFair call with a fresh token and longTTL, and
// returns the token with the answer.
func (n *node) fair(key, ticket string, score int64, stay time.Duration) (tok string, ok bool, ahead int64) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	tok = token()
	n.attempts++
	ok, ahead, err := n.fairQueuer().AcquireFair(ctx, key, tok, longTTL, ticket, score, stay, n.attempts)
	if err != nil {
		n.t.Fatalf("AcquireFair(%q, ticket %q, score %d): unexpected error: %v", key, ticket, score, err)
	}
	return tok, ok, ahead
}

func (n *node) mustQueue(key, ticket string, score int64, stay time.Duration, wantAhead int64) {
	n.t.Helper()
	if _, ok, ahead := n.fair(key, ticket, score, stay); ok || ahead != wantAhead {
		n.t.Fatalf("AcquireFair(ticket %q, score %d) = %v, %d ahead; want false, %d ahead", ticket, score, ok, ahead, wantAhead)
	}
}

func (n *node) mustGrantFair(key, ticket string, score int64) string {
	n.t.Helper()
	tok, ok, ahead := n.fair(key, ticket, score, longTTL)
	if !ok {
		n.t.Fatalf("AcquireFair(ticket %q, score %d) of a free key, as the queue's head, = false, %d ahead; want true", ticket, score, ahead)
	}
	return tok
}

func (n *node) releaseFair(key, tok, ticket string) bool {
	n.t.Helper()
	return n.releaseFairAnnounced(key, tok, ticket, false)
}

// releaseFairAnnounced is releaseFair with announce (which a grant needs).
func (n *node) releaseFairAnnounced(key, tok, ticket string, announce bool) bool {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	ok, err := n.fairQueuer().ReleaseFair(ctx, key, tok, ticket, announce)
	if err != nil {
		n.t.Fatalf("ReleaseFair(%q, %q, %q): unexpected error: %v", key, tok, ticket, err)
	}
	return ok
}

func (n *node) mustReleaseFair(key, tok, ticket string) {
	n.t.Helper()
	if !n.releaseFair(key, tok, ticket) {
		n.t.Fatalf("ReleaseFair(%q) with the token that holds the key reported false, want true", key)
	}
}

func (n *node) leave(key, ticket string) {
	n.t.Helper()
	ctx, cancel := n.ctx()
	defer cancel()
	if err := n.fairQueuer().LeaveQueue(ctx, key, ticket); err != nil {
		n.t.Fatalf("LeaveQueue(%q, %q): unexpected error: %v", key, ticket, err)
	}
}

var fairChecks = []check{
	// An empty queue grants a free key. The grant keeps the entry at the
	// head (a plain Release, a rollback, keeps it); ReleaseFair removes it.
	{"Free", func(n *node) {
		key := n.key()
		n.mustRelease(key, n.mustGrantFair(key, "a", 20))
		n.mustQueue(key, "b", 30, longTTL, 1) // "a" still ahead
		n.mustReleaseFair(key, n.mustGrantFair(key, "a", 20), "a")
		if n.isHeld(key) { // not announced: hand-off is off, nothing is granted
			n.t.Fatal("ReleaseFair(announce=false) granted the key to the next waiter")
		}
		n.mustReleaseFair(key, n.mustGrantFair(key, "b", 30), "b")
	}},
	// ReleaseFair by someone not holding the key removes its entry, and
	// deletes nothing.
	{"ReleaseFairNotHolder", func(n *node) {
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		n.mustQueue(key, "a", 1, longTTL, 0)
		if n.releaseFair(key, token(), "a") {
			n.t.Fatal("ReleaseFair with a token that does not hold the key reported true, want false")
		}
		n.mustQueue(key, "b", 2, longTTL, 0) // "a" is gone
		n.mustRelease(key, holder)
		n.mustReleaseFair(key, n.mustGrantFair(key, "b", 2), "b")
	}},
	// A held key is refused to the head too, and keeps its token.
	{"RefuseWhileHeld", func(n *node) {
		n.fairQueuer()
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		n.mustQueue(key, "a", 10, longTTL, 0)
		n.mustQueue(key, "a", 10, longTTL, 0) // a refresh: still the head
		n.mustRelease(key, holder)
	}},
	// The queue is ordered by the caller's score, not by arrival, and a
	// refresh keeps the place.
	{"OrderByScore", func(n *node) {
		n.fairQueuer()
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		n.mustQueue(key, "late", 200, longTTL, 0)
		n.mustQueue(key, "early", 100, longTTL, 0)
		n.mustQueue(key, "late", 200, longTTL, 1)
		n.mustRelease(key, holder)
		n.mustQueue(key, "late", 200, longTTL, 1) // free, but not the head
		n.mustReleaseFair(key, n.mustGrantFair(key, "early", 100), "early")
		n.mustReleaseFair(key, n.mustGrantFair(key, "late", 200), "late")
	}},
	// An entry that is not refreshed within its stay stops blocking.
	{"DeadEntryExpires", func(n *node) {
		n.fairQueuer()
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		n.mustQueue(key, "dead", 1, n.ttl, 0)
		n.mustRelease(key, holder)
		start := time.Now()
		n.mustQueue(key, "alive", 2, longTTL, 1)
		// The entries expire by the server's time: sleep on real time too,
		// where Elapse moves a fake clock (miniredis).
		n.expire(n.ttl)
		if n.tg.Elapse != nil {
			time.Sleep(time.Until(start.Add(n.ttl + n.pad)))
		}
		n.mustReleaseFair(key, n.mustGrantFair(key, "alive", 2), "alive")
	}},
	// A ticket that leaves no longer blocks; leaving twice is harmless.
	{"Leave", func(n *node) {
		n.fairQueuer()
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		n.mustQueue(key, "a", 1, longTTL, 0)
		n.mustQueue(key, "b", 2, longTTL, 1)
		n.mustRelease(key, holder)
		n.leave(key, "a")
		n.leave(key, "a")
		n.mustReleaseFair(key, n.mustGrantFair(key, "b", 2), "b")
	}},
	// ReleaseFair, announced, hands the key on to the queue's head: it sets the key to
	// the token the head's latest AcquireFair registered (a grant), or, on
	// a node that cannot vouch for grants (goredis WithReplicaAck), leaves
	// it free for the head. The head's next AcquireFair takes it over with
	// its new token.
	{"ReleaseHandsOn", func(n *node) {
		key := n.key()
		ta := n.mustGrantFair(key, "a", 1)
		tb, ok, _ := n.fair(key, "b", 2, longTTL)
		if ok {
			n.t.Fatal("AcquireFair of a held key reported true")
		}
		if !n.releaseFairAnnounced(key, ta, "a", true) {
			n.t.Fatal("ReleaseFair by the holder reported false, want true")
		}
		if n.isHeld(key) {
			if n.acquire(key, token(), longTTL) {
				n.t.Fatal("Acquire of a key granted to the head reported true")
			}
			if n.extend(key, tb, longTTL) != true {
				n.t.Fatal("the key granted to the head does not hold the token its AcquireFair registered")
			}
		}
		n.mustReleaseFair(key, n.mustGrantFair(key, "b", 2), "b")
		if n.isHeld(key) {
			n.t.Fatal("the key is held after its last waiter released it")
		}
	}},
	// An attempt delivered late, after a later one of the same call, does
	// not replace the later one's registration, nor take over its grant
	// (its rollback, with its own token, would then delete a key that the
	// later attempt's claim counts on).
	{"LateAttemptTakesOverNothing", func(n *node) {
		fq := n.fairQueuer()
		key := n.key()
		ta := n.mustGrantFair(key, "a", 1)
		ctx, cancel := n.ctx()
		defer cancel()
		late, later := token(), token()
		n.attempts += 2
		if ok, _, err := fq.AcquireFair(ctx, key, later, longTTL, "b", 2, longTTL, n.attempts); err != nil || ok {
			n.t.Fatalf("AcquireFair of a held key = %v, %v; want false, nil", ok, err)
		}
		if ok, _, err := fq.AcquireFair(ctx, key, late, longTTL, "b", 2, longTTL, n.attempts-1); err != nil || ok {
			n.t.Fatalf("a late AcquireFair of a held key = %v, %v; want false, nil", ok, err)
		}
		if !n.releaseFairAnnounced(key, ta, "a", true) {
			n.t.Fatal("ReleaseFair by the holder reported false, want true")
		}
		if n.isHeld(key) {
			if !n.extend(key, later, longTTL) {
				n.t.Fatal("the grant went to the late attempt's token, not the later one's")
			}
			if ok, _, err := fq.AcquireFair(ctx, key, token(), longTTL, "b", 2, longTTL, n.attempts-1); err != nil || ok {
				n.t.Fatalf("a late AcquireFair took over the later attempt's grant: %v, %v", ok, err)
			}
			if !n.extend(key, later, longTTL) {
				n.t.Fatal("the later attempt's grant lost its token to a late attempt")
			}
		}
		n.mustReleaseFair(key, n.mustGrantFair(key, "b", 2), "b")
	}},
	// A waiter that leaves, or releases with another token, gives back a
	// grant it did not use, and the key goes on to the next head.
	{"UnusedGrantGoesOn", func(n *node) {
		key := n.key()
		ta := n.mustGrantFair(key, "a", 1)
		n.mustQueue(key, "b", 2, longTTL, 1)
		tc, _, _ := n.fair(key, "c", 3, longTTL)
		n.mustQueue(key, "d", 4, longTTL, 3)
		if !n.releaseFairAnnounced(key, ta, "a", true) {
			n.t.Fatal("ReleaseFair by the holder reported false, want true")
		}
		if !n.isHeld(key) {
			n.t.Skip("the node names the next waiter without granting it the key")
		}
		n.leave(key, "b")
		if !n.release(key, tc, false) {
			n.t.Fatal("after the head left, its grant did not go on to the next waiter")
		}
		n.mustQueue(key, "d", 4, longTTL, 1) // "c" is still queued: a plain Release keeps the entry
		if !n.releaseFairAnnounced(key, n.mustGrantFair(key, "c", 3), "c", true) {
			n.t.Fatal("ReleaseFair by the holder reported false, want true")
		}
		if !n.releaseFair(key, token(), "d") {
			n.t.Fatal("ReleaseFair did not delete the key granted to its ticket")
		}
		if n.isHeld(key) {
			n.t.Fatal("the key is held after every waiter left")
		}
	}},
	// A release announces its grant (or, on a node that does not grant,
	// its naming) of the head whose ticket begins with a locker's id and
	// "." on that locker's channel, where NotifyGrants hears it.
	{"GrantAnnouncedToLocker", func(n *node) {
		n.notifier()
		fq := n.fairQueuer()
		key := n.key()
		ta := n.mustGrantFair(key, "L1.a", 1)
		tb, _, _ := n.fair(key, "L2.b", 2, longTTL)
		s := n.subscribe("NotifyGrants("+key+", L2)", func(ctx context.Context, released func(string)) (func(), error) {
			return fq.NotifyGrants(ctx, key, "L2", released)
		})
		ctx, cancel := n.ctx()
		defer cancel()
		if ok, err := fq.ReleaseFair(ctx, key, ta, "L1.a", true); err != nil || !ok {
			n.t.Fatalf("ReleaseFair by the holder = %v, %v; want true, nil", ok, err)
		}
		if n.isHeld(key) {
			s.expect("grant=L2.b "+tb, "the grant to the head")
		} else {
			s.expect("next=L2.b "+ta, "the naming of the head")
		}
		s.end()
		n.mustReleaseFair(key, n.mustGrantFair(key, "L2.b", 2), "L2.b")
	}},
	// NotifyGrants hears the key's release channel too: a fair waiter
	// subscribes once for both (a release with nobody queued, or of a
	// lock taken without the queue, announces there).
	{"GrantNotifierHearsReleases", func(n *node) {
		n.notifier()
		fq := n.fairQueuer()
		key := n.key()
		s := n.subscribe("NotifyGrants("+key+", L2)", func(ctx context.Context, released func(string)) (func(), error) {
			return fq.NotifyGrants(ctx, key, "L2", released)
		})
		s.expect(n.cycle(key), "a plain release announced on the key's channel")
		s.end()
	}},
	// Acquire ignores the queue (a call that has not joined it barges).
	{"AcquireIgnoresQueue", func(n *node) {
		n.fairQueuer()
		key, holder := n.key(), token()
		n.mustAcquire(key, holder, longTTL)
		n.mustQueue(key, "a", 1, longTTL, 0)
		n.mustRelease(key, holder)
		tok := token()
		n.mustAcquire(key, tok, longTTL)
		n.mustQueue(key, "a", 1, longTTL, 0)
		n.mustRelease(key, tok)
		n.leave(key, "a")
	}},
}
