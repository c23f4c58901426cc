// Package fakenode is the tests' one fake Backend: it wraps a real node
// (the go-redis adapter over miniredis or redis-server) so that a test can
// count its calls and change what they do: fail a node, hold a call, lose
// its reply, deliver it late, or move a fake clock while it runs.
//
// Every call goes through the node's hook, if any, as a Call; the hook
// decides whether and when Send reaches the wrapped node, and what the
// caller is told. Without a hook every call goes straight through.
package fakenode

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
)

// Op names the Backend method a Call stands for.
type Op string

// The operations a hook sees.
const (
	Acquire       Op = "acquire"
	Release       Op = "release"
	Extend        Op = "extend"
	AcquireFenced Op = "acquire fenced"
	RaiseFence    Op = "raise fence"
)

// Result is what a call answers: OK the method's boolean, Fence the
// counter AcquireFenced returned.
type Result struct {
	OK    bool
	Fence int64
	Err   error
}

// Call is one call on its way to the wrapped node.
type Call struct {
	Op         Op
	Key, Token string
	send       func(ctx context.Context) Result
}

// Send makes the call on the wrapped node and returns its answer. A hook
// may call it on another context (a late delivery runs on
// context.Background after the caller gave up), later, or not at all.
func (c Call) Send(ctx context.Context) Result { return c.send(ctx) }

// Hook stands between the lockers and the node.
type Hook func(ctx context.Context, c Call) Result

// ErrInjected is the error a hook returns for a node it fails.
var ErrInjected = errors.New("fakenode: injected fault")

// Node wraps a Backend. It implements Fencer and Notifier by passing them
// on to the wrapped node, which must implement them when they are used; use
// Plain to hide them.
type Node struct {
	inner redlock.Backend

	mu     sync.Mutex
	hook   Hook
	counts map[Op]int
	done   map[Op]int
}

// Wrap returns a Node over b, with no hook.
func Wrap(b redlock.Backend) *Node { return &Node{inner: b, counts: map[Op]int{}, done: map[Op]int{}} }

// WrapAll wraps every node of bs, returning the wrapped list for the
// lockers and the Nodes for the test.
func WrapAll(bs []redlock.Backend) ([]redlock.Backend, []*Node) {
	out := make([]redlock.Backend, len(bs))
	ns := make([]*Node, len(bs))
	for i, b := range bs {
		ns[i] = Wrap(b)
		out[i] = ns[i]
	}
	return out, ns
}

// Plain returns n as a bare Backend, hiding Fencer and Notifier.
func Plain(n *Node) redlock.Backend { return struct{ redlock.Backend }{n} }

// Silent returns n as a Backend and Fencer that cannot notify: waiters on
// it sleep out their backoff delays.
func Silent(n *Node) redlock.Backend {
	return struct {
		redlock.Backend
		redlock.Fencer
	}{n, n}
}

// SetHook replaces the hook; nil lets every call through.
func (n *Node) SetHook(h Hook) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hook = h
}

// Calls returns how many calls of op reached the Node (whatever the hook
// did with them).
func (n *Node) Calls(op Op) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.counts[op]
}

// Answered returns how many calls of op returned to their caller: a
// call counted by Calls may still be on its way to the node.
func (n *Node) Answered(op Op) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.done[op]
}

func (n *Node) call(ctx context.Context, c Call) Result {
	n.mu.Lock()
	n.counts[c.Op]++
	h := n.hook
	n.mu.Unlock()
	var r Result
	if h == nil {
		r = c.Send(ctx)
	} else {
		r = h(ctx, c)
	}
	n.mu.Lock()
	n.done[c.Op]++
	n.mu.Unlock()
	return r
}

// Name is the wrapped node's.
func (n *Node) Name() string { return n.inner.Name() }

func (n *Node) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := n.call(ctx, Call{Op: Acquire, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.Acquire(ctx, key, token, ttl)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

func (n *Node) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	r := n.call(ctx, Call{Op: Release, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.Release(ctx, key, token, announce)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

func (n *Node) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := n.call(ctx, Call{Op: Extend, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.Extend(ctx, key, token, ttl)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

func (n *Node) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	r := n.call(ctx, Call{Op: AcquireFenced, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, f, err := n.inner.(redlock.Fencer).AcquireFenced(ctx, key, token, ttl)
		return Result{OK: ok, Fence: f, Err: err}
	}})
	return r.OK, r.Fence, r.Err
}

func (n *Node) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	r := n.call(ctx, Call{Op: RaiseFence, Key: key, Token: token, send: func(ctx context.Context) Result {
		ok, err := n.inner.(redlock.Fencer).RaiseFence(ctx, key, token, fence)
		return Result{OK: ok, Err: err}
	}})
	return r.OK, r.Err
}

// Notify is the wrapped node's; the hook does not see it.
func (n *Node) Notify(ctx context.Context, key string, released func(payload string)) (func(), error) {
	return n.inner.(redlock.Notifier).Notify(ctx, key, released)
}
