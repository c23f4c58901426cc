package drivertest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// Target is one node under test, as the function given to Run makes it
// for a subtest.
type Target struct {
	// Node is the adapter under test.
	Node driver.Node

	// Elapse moves the node's clock on by d (miniredis's FastForward);
	// nil on a real server, where the suite sleeps instead.
	Elapse func(d time.Duration)

	// Stall stops the node from answering until resume is called (a
	// paused server, a proxy that holds the traffic); nil skips the
	// checks that need a node that does not answer.
	Stall func() (resume func())
}

// Run checks the node that newTarget returns against the contract of
// package driver, then runs every primitive of the core over it. Every
// check is a subtest that names the rule it found broken. newTarget is
// called once per subtest; it may return the same server every time: the
// suite uses keys of its own in each subtest.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	t.Run("Info", func(t *testing.T) { checkInfo(t, newTarget(t)) })
	t.Run("Replies", func(t *testing.T) { checkReplies(t, newTarget(t)) })
	t.Run("NoScript", func(t *testing.T) { checkNoScript(t, newTarget(t)) })
	t.Run("Atomic", func(t *testing.T) { checkAtomic(t, newTarget(t)) })
	t.Run("Cancelled", func(t *testing.T) { checkCancelled(t, newTarget(t)) })
	t.Run("Stalled", func(t *testing.T) { checkStalled(t, newTarget(t)) })
	t.Run("Subscribe", func(t *testing.T) { checkSubscribe(t, newTarget(t)) })
	t.Run("Primitives", func(t *testing.T) { checkPrimitives(t, newTarget) })
}

// prefix returns keys of the subtest's own, with one hash tag, so that a
// Redis Cluster node can hold any set of them.
func prefix(t *testing.T) string {
	return "{drivertest:" + rand.Text()[:10] + "}:" + strings.ReplaceAll(t.Name(), "/", ":")
}

// script returns a script whose source no node has seen: its hash is new,
// so the first Eval meets NOSCRIPT.
func script(name, body string) *driver.Script {
	return driver.NewScript(name, "-- drivertest "+rand.Text()+"\n"+body)
}

// bound is how long a call that must return promptly may take.
const bound = 2 * time.Second

func eval(t *testing.T, n driver.Node, s *driver.Script, keys []string, args ...string) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	r, err := n.Eval(ctx, s, keys, args...)
	if err != nil {
		t.Fatalf("Eval %s: %v", s.Name(), err)
	}
	return r
}

func checkInfo(t *testing.T, tg Target) {
	a, b := tg.Node.Info(), tg.Node.Info()
	if a.Name == "" {
		t.Error("Info().Name is empty: a node must be named (errors, duplicate nodes)")
	}
	if a != b {
		t.Errorf("Info() changed between two calls: %+v, then %+v", a, b)
	}
}

// checkReplies: Eval converts replies as the contract says.
func checkReplies(t *testing.T, tg Target) {
	k := prefix(t)
	cases := []struct {
		src  string
		want any
	}{
		{"return 42", int64(42)},
		{"return -7", int64(-7)},
		{"return 'text'", "text"},
		{"return false", nil},
		{"return redis.call('get', KEYS[1])", nil}, // a nil bulk
		{"return redis.status_reply('OK')", "OK"},
		{"return {1, 'two', {3, false}}", []any{int64(1), "two", []any{int64(3), nil}}},
	}
	for _, c := range cases {
		got := eval(t, tg.Node, script("reply", c.src), []string{k})
		if !equal(got, c.want) {
			t.Errorf("Eval of %q = %#v, want %#v (the contract's conversion)", c.src, got, c.want)
		}
	}
	for _, src := range []string{"return redis.error_reply('WRONG it failed here')", "return redis.call('incr', KEYS[1])"} {
		if src == "return redis.call('incr', KEYS[1])" {
			eval(t, tg.Node, script("set", "return redis.call('set', KEYS[1], 'not a number')"), []string{k})
		}
		_, err := tg.Node.Eval(t.Context(), script("fail", src), []string{k})
		if err == nil {
			t.Errorf("Eval of %q returned no error: an error reply must be an error", src)
		}
	}
	_, err := tg.Node.Eval(t.Context(), script("fail", "return redis.error_reply('WRONG it failed here')"), []string{k})
	if err != nil && !strings.Contains(err.Error(), "it failed here") {
		t.Errorf("the error %q does not carry the node's text", err)
	}
}

// equal compares replies, slices element by element.
func equal(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok != bok {
		return false
	}
	if !aok {
		return a == b
	}
	if len(as) != len(bs) {
		return false
	}
	for i := range as {
		if !equal(as[i], bs[i]) {
			return false
		}
	}
	return true
}

// checkNoScript: a script the node has never seen runs, once.
func checkNoScript(t *testing.T, tg Target) {
	k := prefix(t)
	s := script("incr", "return redis.call('incr', KEYS[1])")
	if got := eval(t, tg.Node, s, []string{k}); got != int64(1) {
		t.Fatalf("the first Eval of a new script = %#v, want 1: it must run once (EVALSHA, then EVAL on NOSCRIPT)", got)
	}
	if got := eval(t, tg.Node, s, []string{k}); got != int64(2) {
		t.Errorf("the second Eval = %#v, want 2", got)
	}
}

// checkAtomic: concurrent scripts never see another's writes half done.
func checkAtomic(t *testing.T, tg Target) {
	k := prefix(t)
	a, b := k+":a", k+":b"
	write := script("write", "redis.call('incr', KEYS[1]) redis.call('incr', KEYS[2]) return 1")
	read := script("read", "return {redis.call('get', KEYS[1]) or '0', redis.call('get', KEYS[2]) or '0'}")
	eval(t, tg.Node, write, []string{a, b})
	eval(t, tg.Node, read, []string{a, b})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				if _, err := tg.Node.Eval(t.Context(), write, []string{a, b}); err != nil {
					t.Errorf("Eval: %v", err)
					return
				}
			}
		})
		wg.Go(func() {
			for range 25 {
				r, err := tg.Node.Eval(t.Context(), read, []string{a, b})
				if err != nil {
					t.Errorf("Eval: %v", err)
					return
				}
				if v, ok := r.([]any); !ok || len(v) != 2 || v[0] != v[1] {
					t.Errorf("a script saw another's writes half done: %#v", r)
					return
				}
			}
		})
	}
	wg.Wait()
}

// checkCancelled: a call whose context is done sends nothing.
func checkCancelled(t *testing.T, tg Target) {
	k := prefix(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	_, err := tg.Node.Eval(ctx, script("incr", "return redis.call('incr', KEYS[1])"), []string{k})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Eval with a cancelled context = %v, want an error matching context.Canceled", err)
	}
	if d := time.Since(start); d > bound {
		t.Errorf("Eval with a cancelled context took %v", d)
	}
	if got := eval(t, tg.Node, script("get", "return redis.call('get', KEYS[1])"), []string{k}); got != nil {
		t.Errorf("the cancelled call ran: the counter is %#v", got)
	}
}

// checkStalled: on a node that does not answer a call returns by its
// deadline, alone and with others in flight, and is never sent again.
func checkStalled(t *testing.T, tg Target) {
	if tg.Stall == nil {
		t.Skip("Target.Stall is nil")
	}
	k := prefix(t)
	incr := script("incr", "return redis.call('incr', KEYS[1])")
	eval(t, tg.Node, incr, []string{k}) // loaded and connected: 1
	resume := tg.Stall()
	const deadline = 200 * time.Millisecond
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			_, err := tg.Node.Eval(ctx, incr, []string{fmt.Sprint(k, ":", i)})
			if err == nil {
				t.Errorf("Eval on a stalled node returned no error")
			}
			if d := time.Since(start); d > deadline+bound {
				t.Errorf("Eval on a stalled node took %v, past its deadline of %v", d, deadline)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	_, err := tg.Node.Eval(ctx, incr, []string{k})
	cancel()
	if err == nil {
		t.Error("Eval on a stalled node returned no error")
	}
	wg.Wait()
	resume()
	// The call may have reached the node before it stalled, or after it
	// resumed: it ran at most once, never twice.
	time.Sleep(100 * time.Millisecond)
	got := eval(t, tg.Node, script("get", "return tonumber(redis.call('get', KEYS[1]))"), []string{k})
	if n, _ := got.(int64); n > 2 {
		t.Errorf("the counter is %v after one call that timed out: it was sent again", got)
	}
	if got := eval(t, tg.Node, incr, []string{k + ":after"}); got != int64(1) {
		t.Errorf("after resuming, Eval = %#v, want 1: the node works again", got)
	}
}

// checkSubscribe: a subscription is active when Subscribe returns, reaches
// every subscriber, and ends when stop returns.
func checkSubscribe(t *testing.T, tg Target) {
	sub, ok := tg.Node.(driver.Subscriber)
	if !ok {
		t.Skip("the node is no driver.Subscriber")
	}
	k := prefix(t)
	chA, chB := "redlock:released:"+k+":a", "redlock:released:"+k+":b"
	publish := "publish"
	if tg.Node.Info().Cluster {
		publish = "spublish"
	}
	pub := script("publish", "return redis.call('"+publish+"', KEYS[1], ARGV[1])")
	got := make(chan string, 16)
	deliver := func(p string) {
		if p != "" { // "" after a reconnection is allowed
			got <- p
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	stop1, err := sub.Subscribe(ctx, deliver, chA, chB)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	stop2, err := sub.Subscribe(ctx, deliver, chA)
	if err != nil {
		stop1()
		t.Fatalf("Subscribe: %v", err)
	}
	eval(t, tg.Node, pub, []string{chA}, "one")
	eval(t, tg.Node, pub, []string{chB}, "two")
	want := map[string]int{"one": 2, "two": 1}
	for range 3 {
		select {
		case p := <-got:
			want[p]--
		case <-time.After(bound):
			t.Fatalf("a message published after Subscribe returned was not delivered: missing %v", want)
		}
	}
	if want["one"] != 0 || want["two"] != 0 {
		t.Errorf("deliveries off by %v (two subscribers of one channel, one of both)", want)
	}
	start := time.Now()
	stop1()
	stop2()
	if d := time.Since(start); d > bound {
		t.Errorf("stop took %v", d)
	}
	eval(t, tg.Node, pub, []string{chA}, "late")
	select {
	case p := <-got:
		t.Errorf("%q delivered after stop returned", p)
	case <-time.After(100 * time.Millisecond):
	}
}
