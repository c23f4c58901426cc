package backendtest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
)

// starter returns the node's Starter, or skips the subtest.
func (n *node) starter() redlock.Starter {
	n.t.Helper()
	s, ok := n.b.(redlock.Starter)
	if !ok {
		n.t.Skipf("%T does not implement redlock.Starter (optional; rounds then run a goroutine per node)", n.b)
	}
	return s
}

// finish finishes p, failing the subtest when it does not return within
// CallTimeout + PromptBound.
func (n *node) finish(what string, p redlock.Pending) (bool, error) {
	n.t.Helper()
	var ok bool
	var err error
	a := async(func() { ok, err = p.Finish() })
	if !a.within(CallTimeout + PromptBound) {
		a.reap(n.t, what)
		n.t.Fatalf("%s: Finish did not return within %v of its deadline", what, PromptBound)
	}
	return ok, err
}

var starterChecks = []check{
	// Started calls answer as the calls they split: a free key is
	// acquired, a held one refused, extended and released by its holder
	// only.
	{"StartThenFinish", func(n *node) {
		s := n.starter()
		key, tok, other := n.key(), token(), token()
		ctx, cancel := n.ctx()
		defer cancel()
		steps := []struct {
			what  string
			start func() redlock.Pending
			want  bool
		}{
			{"StartAcquire of a free key", func() redlock.Pending { return s.StartAcquire(ctx, key, tok, longTTL) }, true},
			{"StartAcquire of a held key", func() redlock.Pending { return s.StartAcquire(ctx, key, other, longTTL) }, false},
			{"StartExtend by the holder", func() redlock.Pending { return s.StartExtend(ctx, key, tok, longTTL) }, true},
			{"StartExtend by another token", func() redlock.Pending { return s.StartExtend(ctx, key, other, longTTL) }, false},
			{"StartRelease by another token", func() redlock.Pending { return s.StartRelease(ctx, key, other, true) }, false},
			{"StartRelease by the holder", func() redlock.Pending { return s.StartRelease(ctx, key, tok, true) }, true},
			{"StartRelease of a released key", func() redlock.Pending { return s.StartRelease(ctx, key, tok, false) }, false},
		}
		for _, st := range steps {
			ok, err := n.finish(st.what, st.start())
			if err != nil {
				n.t.Fatalf("%s: unexpected error: %v", st.what, err)
			}
			if ok != st.want {
				n.t.Fatalf("%s reported %v, want %v", st.what, ok, st.want)
			}
		}
	}},
	// Several calls started on one goroutine before any is finished (a
	// round whose rollback meets one node twice), finished in order.
	{"StartedTogether", func(n *node) {
		s := n.starter()
		ctx, cancel := n.ctx()
		defer cancel()
		keys := []string{n.key(), n.key(), n.key()}
		tok := token()
		ps := make([]redlock.Pending, 0, 2*len(keys))
		for _, k := range keys {
			ps = append(ps, s.StartAcquire(ctx, k, tok, longTTL))
		}
		ps = append(ps, s.StartAcquire(ctx, keys[0], token(), longTTL))
		for i, p := range ps {
			ok, err := n.finish("StartAcquire", p)
			if err != nil {
				n.t.Fatalf("StartAcquire %d of %d started together: unexpected error: %v", i, len(ps), err)
			}
			if want := i < len(keys); ok != want {
				n.t.Fatalf("StartAcquire %d of %d started together reported %v, want %v", i, len(ps), ok, want)
			}
		}
		for _, k := range keys {
			n.mustRelease(k, tok)
		}
	}},
	// A call whose context is done at Start sends nothing, and its Finish
	// returns the context's error at once.
	{"Canceled", func(n *node) {
		s := n.starter()
		key := n.key()
		ctx, cancel := context.WithCancel(n.t.Context())
		cancel()
		p := s.StartAcquire(ctx, key, token(), longTTL)
		var err error
		a := async(func() { _, err = p.Finish() })
		if !a.within(PromptBound) {
			a.reap(n.t, "Finish")
			n.t.Fatalf("Finish of a call started with a cancelled context did not return within %v", PromptBound)
		}
		if !errors.Is(err, context.Canceled) {
			n.t.Errorf("Finish of a call started with a cancelled context returned error %v, want one matching context.Canceled", err)
		}
		if n.isHeld(key) {
			n.t.Fatal("StartAcquire with a cancelled context set the key: a caller that gave up must send nothing")
		}
	}},
	// A call finished after its deadline returns an error at once (its
	// outcome unknown), and the node works for the next calls: a late
	// reply is never taken for theirs.
	{"FinishAfterDeadline", func(n *node) {
		s := n.starter()
		key, tok := n.key(), token()
		ctx, cancel := context.WithTimeout(n.t.Context(), StallDeadline)
		p := s.StartAcquire(ctx, key, tok, longTTL)
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond)
		var err error
		a := async(func() { _, err = p.Finish() })
		cancel()
		if !a.within(PromptBound) {
			a.reap(n.t, "Finish")
			n.t.Fatalf("Finish after the call's deadline did not return within %v", PromptBound)
		}
		// Either answer is allowed (the reply may have been read before
		// the deadline passed); an error must say a deadline ran out.
		if err != nil && !isDeadline(err) {
			n.t.Errorf("Finish after the deadline returned error %v, want none or one matching context.DeadlineExceeded (or os.ErrDeadlineExceeded)", err)
		}
		// The key may or may not be set: a second token must be refused
		// exactly when it is, whatever reply came late.
		held := n.isHeld(key)
		if got := n.acquire(key, token(), longTTL); got == held {
			n.t.Fatalf("after a call finished past its deadline, Acquire reported %v on a key that is held=%v", got, held)
		}
		if held {
			n.mustRelease(key, tok)
		}
	}},
	// Calls started on one node from many goroutines at once, each
	// finished by its own goroutine: exactly one wins a free key.
	{"Concurrent", func(n *node) {
		s := n.starter()
		key := n.key()
		toks := make([]string, Racers)
		for i := range toks {
			toks[i] = token()
		}
		won := n.race("StartAcquire", func(ctx context.Context, i int) (bool, error) {
			return s.StartAcquire(ctx, key, toks[i], longTTL).Finish()
		})
		if len(won) != 1 {
			n.t.Fatalf("%d goroutines raced StartAcquire on one free key and %d won, want exactly 1", Racers, len(won))
		}
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for i := range Racers {
			wg.Go(func() {
				ctx, cancel := n.ctx()
				defer cancel()
				if _, err := s.StartRelease(ctx, key, toks[i], false).Finish(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			n.t.Fatalf("concurrent StartRelease: %v", err)
		}
		if n.isHeld(key) {
			n.t.Fatal("the key is still held after its holder's StartRelease")
		}
	}},
}

// fairStarter returns the node's FairStarter, or skips the subtest.
func (n *node) fairStarter() redlock.FairStarter {
	n.t.Helper()
	n.fairQueuer()
	s, ok := n.b.(redlock.FairStarter)
	if !ok {
		n.t.Skipf("%T does not implement redlock.FairStarter (optional; fair rounds then run a goroutine per node)", n.b)
	}
	return s
}

// finishFair is finish for a started AcquireFair.
func (n *node) finishFair(what string, p redlock.FairPending) (ok bool, ahead int64, err error) {
	n.t.Helper()
	a := async(func() { ok, ahead, err = p.FinishFair() })
	if !a.within(CallTimeout + PromptBound) {
		a.reap(n.t, what)
		n.t.Fatalf("%s: FinishFair did not return within %v of its deadline", what, PromptBound)
	}
	return ok, ahead, err
}

var fairStarterChecks = []check{
	// Started fair calls, several started before any is finished, answer
	// as the calls they split: the head is granted a free key, the
	// others are told how many entries are ahead, a release by another
	// token only removes its entry, the holder's deletes the key.
	{"StartThenFinish", func(n *node) {
		s := n.fairStarter()
		key, ta, tb, tc := n.key(), token(), token(), token()
		ctx, cancel := n.ctx()
		defer cancel()
		pa := s.StartAcquireFair(ctx, key, ta, longTTL, "a", 1, longTTL, 1)
		pb := s.StartAcquireFair(ctx, key, tb, longTTL, "b", 2, longTTL, 1)
		pc := s.StartAcquireFair(ctx, key, tc, longTTL, "c", 3, longTTL, 1)
		for i, want := range []struct {
			p     redlock.FairPending
			ok    bool
			ahead int64
		}{{pa, true, 0}, {pb, false, 1}, {pc, false, 2}} {
			ok, ahead, err := n.finishFair("StartAcquireFair", want.p)
			if err != nil {
				n.t.Fatalf("StartAcquireFair %d: unexpected error: %v", i, err)
			}
			if ok != want.ok || (!ok && ahead != want.ahead) {
				n.t.Fatalf("StartAcquireFair %d = %v, %d ahead; want %v, %d ahead", i, ok, ahead, want.ok, want.ahead)
			}
		}
		if ok, err := n.finish("StartReleaseFair by another token", s.StartReleaseFair(ctx, key, tc, "c", false)); err != nil || ok {
			n.t.Fatalf("StartReleaseFair by a token that does not hold the key = %v, %v; want false, nil", ok, err)
		}
		n.mustQueue(key, "b", 2, longTTL, 1) // "c" left; "a" still ahead
		if ok, err := n.finish("StartReleaseFair by the holder", s.StartReleaseFair(ctx, key, ta, "a", false)); err != nil || !ok {
			n.t.Fatalf("StartReleaseFair by the holder = %v, %v; want true, nil", ok, err)
		}
		if n.isHeld(key) {
			n.t.Fatal("the key is held after its holder's StartReleaseFair (not announced: nothing granted)")
		}
		n.mustReleaseFair(key, n.mustGrantFair(key, "b", 2), "b")
	}},
	// A started ReleaseFair whose Pending is a GrantPending, announced,
	// returns rather than announces its grant to a waiter of the releasing
	// ticket's own locker (tickets "L.a" and "L.b"), and announces, not
	// returns, a grant to another locker's ("M.e"); Finish reports the
	// release either way.
	{"GrantPending", func(n *node) {
		s := n.fairStarter()
		key := n.key()
		ctx, cancel := n.ctx()
		defer cancel()
		ta := n.mustGrantFair(key, "L.a", 1)
		tb, _, _ := n.fair(key, "L.b", 2, longTTL)
		p := s.StartReleaseFair(ctx, key, ta, "L.a", true)
		g, ok := p.(redlock.GrantPending)
		if !ok {
			_, _ = n.finish("StartReleaseFair", p)
			n.t.Skipf("%T's StartReleaseFair returns no redlock.GrantPending (optional)", n.b)
		}
		if ok, grant, err := g.FinishGrant(); err != nil || !ok || grant != "grant=L.b "+tb {
			n.t.Fatalf("FinishGrant of the release before the locker's own waiter = %v, %q, %v; want true, %q, nil", ok, grant, err, "grant=L.b "+tb)
		}
		if !n.releaseFair(key, tb, "L.b") {
			n.t.Fatal("the key does not hold the token the returned grant names")
		}
		td := n.mustGrantFair(key, "L.d", 4)
		te, _, _ := n.fair(key, "M.e", 5, longTTL)
		g = s.StartReleaseFair(ctx, key, td, "L.d", true).(redlock.GrantPending)
		if ok, grant, err := g.FinishGrant(); err != nil || !ok || grant != "" {
			n.t.Fatalf("FinishGrant of the release before another locker's waiter = %v, %q, %v; want true, \"\", nil (announced)", ok, grant, err)
		}
		if !n.releaseFair(key, te, "M.e") {
			n.t.Fatal("the release did not grant the key to another locker's waiter")
		}
		tf := n.mustGrantFair(key, "L.f", 6)
		n.mustQueue(key, "L.g", 7, longTTL, 1)
		if ok, err := n.finish("StartReleaseFair", s.StartReleaseFair(ctx, key, tf, "L.f", true)); err != nil || !ok {
			n.t.Fatalf("Finish of a release that returned its grant = %v, %v; want true, nil", ok, err)
		}
		if !n.isHeld(key) {
			n.t.Fatal("a release whose grant Finish dropped left the key free: the grant was not made")
		}
		n.leave(key, "L.g") // gives the grant back
		if n.isHeld(key) {
			n.t.Fatal("LeaveQueue did not give back the grant the release made")
		}
	}},
	// A call whose context is done at Start sends nothing, and its
	// FinishFair returns the context's error at once.
	{"Canceled", func(n *node) {
		s := n.fairStarter()
		key := n.key()
		ctx, cancel := context.WithCancel(n.t.Context())
		cancel()
		_, _, err := n.finishFair("StartAcquireFair", s.StartAcquireFair(ctx, key, token(), longTTL, "a", 1, longTTL, 1))
		if !errors.Is(err, context.Canceled) {
			n.t.Errorf("FinishFair of a call started with a cancelled context returned error %v, want one matching context.Canceled", err)
		}
		if n.isHeld(key) {
			n.t.Fatal("StartAcquireFair with a cancelled context set the key: a caller that gave up must send nothing")
		}
	}},
}
