package backendtest

import (
	"context"
	"errors"
	"os"
	"sync"

	"github.com/quorumlock/redlock"
)

// op is one call of the adapter, on keys of its own, for the Context
// checks.
type op struct {
	name string
	call func(ctx context.Context) error
}

// ops returns one op per method of the adapter (and of its optional
// interfaces), each on a fresh key.
func (n *node) ops() []op {
	tok := token()
	key := func() string { return n.key() }
	ops := []op{
		{"Acquire", func(ctx context.Context) error {
			_, err := n.b.Acquire(ctx, key(), tok, longTTL)
			return err
		}},
		{"Release", func(ctx context.Context) error {
			_, err := n.b.Release(ctx, key(), tok, true)
			return err
		}},
		{"Extend", func(ctx context.Context) error {
			_, err := n.b.Extend(ctx, key(), tok, longTTL)
			return err
		}},
	}
	if f, ok := n.b.(redlock.Fencer); ok {
		ops = append(ops,
			op{"AcquireFenced", func(ctx context.Context) error {
				_, _, err := f.AcquireFenced(ctx, key(), tok, longTTL)
				return err
			}},
			op{"RaiseFence", func(ctx context.Context) error {
				_, err := f.RaiseFence(ctx, key(), tok, 1)
				return err
			}})
	}
	if tr, ok := n.b.(redlock.Transferrer); ok {
		ops = append(ops, op{"Transfer", func(ctx context.Context) error {
			_, err := tr.Transfer(ctx, key(), tok, token(), longTTL)
			return err
		}})
	}
	if pk, ok := n.b.(redlock.Peeker); ok {
		ops = append(ops, op{"Peek", func(ctx context.Context) error {
			_, _, err := pk.Peek(ctx, key())
			return err
		}})
	}
	if nf, ok := n.b.(redlock.Notifier); ok {
		ops = append(ops, op{"Notify", func(ctx context.Context) error { return notifyCall(ctx, nf, key()) }})
	}
	return ops
}

// isDeadline reports whether err says a deadline ran out: the context's
// (context.DeadlineExceeded) or the one it set on a connection
// (os.ErrDeadlineExceeded, which go-redis returns when the deadline
// passes while it reads the reply).
func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

var contextChecks = []check{
	// An already cancelled context: every call returns promptly with an
	// error matching context.Canceled. Whether the command was sent is
	// not asked (a call may send before it looks at the context).
	{"Canceled", func(n *node) {
		for _, o := range n.ops() {
			ctx, cancel := context.WithCancel(n.t.Context())
			cancel()
			var err error
			p := async(func() { err = o.call(ctx) })
			if !p.within(PromptBound) {
				n.t.Errorf("%s with a cancelled context did not return within %v: every call must honour its context", o.name, PromptBound)
				p.reap(n.t, o.name)
				continue
			}
			if !errors.Is(err, context.Canceled) {
				n.t.Errorf("%s with a cancelled context returned error %v, want one matching context.Canceled", o.name, err)
			}
		}
	}},
	// A stalled node: every call with a short deadline returns an error
	// soon after it, alone or with others waiting on the same node; once
	// the node answers again the adapter works again (new calls do not
	// inherit a broken connection or subscription).
	{"Stall", func(n *node) {
		if n.tg.Stall == nil {
			n.t.Skip("Target.Stall is nil: the deadline checks on a stalled node are skipped")
		}
		// Warm up: the stall then holds an open connection, as in production.
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, longTTL)
		n.mustRelease(key, tok)

		var once sync.Once
		resumeFn := n.tg.Stall()
		resume := func() { once.Do(resumeFn) }
		defer resume()

		for _, o := range n.ops() {
			ctx, cancel := context.WithTimeout(n.t.Context(), StallDeadline)
			var err error
			p := async(func() { err = o.call(ctx) })
			ok := p.within(StallBound)
			cancel()
			if !ok {
				resume()
				p.reap(n.t, o.name)
				n.t.Fatalf("%s with a %v deadline on a stalled node did not return within %v: every call must honour its context's deadline", o.name, StallDeadline, StallBound)
			}
			if !isDeadline(err) {
				n.t.Errorf("%s with a %v deadline on a stalled node returned error %v, want one matching context.DeadlineExceeded (or os.ErrDeadlineExceeded)", o.name, StallDeadline, err)
			}
		}

		// Concurrent callers on the stalled node each end at their own deadline.
		errs := make([]error, Racers)
		var wg sync.WaitGroup
		p := async(func() {
			for i := range Racers {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(n.t.Context(), StallDeadline)
					defer cancel()
					_, errs[i] = n.b.Acquire(ctx, n.key(), token(), longTTL)
				})
			}
			wg.Wait()
		})
		if !p.within(StallBound) {
			resume()
			p.reap(n.t, "concurrent Acquire calls")
			n.t.Fatalf("%d concurrent Acquire calls with a %v deadline on a stalled node did not all return within %v", Racers, StallDeadline, StallBound)
		}
		for i, err := range errs {
			if !isDeadline(err) {
				n.t.Errorf("concurrent Acquire %d with a %v deadline on a stalled node returned error %v, want one matching context.DeadlineExceeded (or os.ErrDeadlineExceeded)", i, StallDeadline, err)
			}
		}

		resume()
		key, tok = n.key(), token()
		if !n.acquire(key, tok, longTTL) {
			n.t.Fatal("after the node resumed, Acquire of a free key reported false")
		}
		if !n.release(key, tok, true) {
			n.t.Fatal("after the node resumed, Release by the holder reported false")
		}
		if _, ok := n.b.(redlock.Fencer); ok {
			n.nextFence(n.key())
		}
		if _, ok := n.b.(redlock.Notifier); ok {
			key := n.key()
			s := n.notify(key)
			s.expect(n.cycle(key), "after the node resumed, a Release(announce=true) right after Notify returned")
		}
	}},
}

var concurrencyChecks = []check{
	{"Acquire", func(n *node) {
		key := n.key()
		toks := make([]string, Racers)
		for i := range toks {
			toks[i] = token()
		}
		won := n.race("Acquire", func(ctx context.Context, i int) (bool, error) {
			return n.b.Acquire(ctx, key, toks[i], longTTL)
		})
		if len(won) != 1 {
			n.t.Fatalf("%d goroutines raced Acquire on one free key with distinct tokens and %d won, want exactly 1", Racers, len(won))
		}
		n.mustRelease(key, toks[won[0]])
	}},
	{"Release", func(n *node) {
		key, tok := n.key(), token()
		n.mustAcquire(key, tok, longTTL)
		won := n.race("Release", func(ctx context.Context, i int) (bool, error) {
			return n.b.Release(ctx, key, tok, i%2 == 0)
		})
		if len(won) != 1 {
			n.t.Fatalf("%d goroutines raced Release of one held key with its token and %d reported true, want exactly 1: the compare-and-delete must be atomic", Racers, len(won))
		}
	}},
	{"AcquireFenced", func(n *node) {
		f := n.fencer()
		key := n.key()
		first := n.nextFence(key)
		toks := make([]string, Racers)
		for i := range toks {
			toks[i] = token()
		}
		fences := make([]int64, Racers)
		won := n.race("AcquireFenced", func(ctx context.Context, i int) (bool, error) {
			ok, fence, err := f.AcquireFenced(ctx, key, toks[i], longTTL)
			fences[i] = fence
			return ok, err
		})
		if len(won) != 1 {
			n.t.Fatalf("%d goroutines raced AcquireFenced on one free key and %d won, want exactly 1", Racers, len(won))
		}
		if got := fences[won[0]]; got != first+1 {
			n.t.Fatalf("the winner of the AcquireFenced race got counter %d, want %d", got, first+1)
		}
		n.mustRelease(key, toks[won[0]])
		if g := n.nextFence(key); g != first+2 {
			n.t.Fatalf("after the AcquireFenced race the next holder got counter %d, want %d: the losers must not move the counter", g, first+2)
		}
	}},
}

// race runs f in Racers goroutines released at once and returns the
// indices of those that reported true; an error fails the subtest.
func (n *node) race(what string, f func(ctx context.Context, i int) (bool, error)) []int {
	n.t.Helper()
	ok := make([]bool, Racers)
	errs := make([]error, Racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range Racers {
		wg.Go(func() {
			ctx, cancel := n.ctx()
			defer cancel()
			<-start
			ok[i], errs[i] = f(ctx, i)
		})
	}
	close(start)
	p := async(wg.Wait)
	if !p.within(CallTimeout + PromptBound) {
		p.reap(n.t, what)
		n.t.Fatalf("%d concurrent %s calls did not all return within %v", Racers, what, CallTimeout+PromptBound)
	}
	var won []int
	for i := range Racers {
		if errs[i] != nil {
			n.t.Fatalf("concurrent %s %d: unexpected error: %v", what, i, errs[i])
		}
		if ok[i] {
			won = append(won, i)
		}
	}
	return won
}
