// Package fakenode is the tests' one fake node: it wraps a real one (the
// go-redis adapter over miniredis or redis-server) so that a test can
// count its script calls and change what they do: fail a node, hold a
// call, lose its reply, deliver it late, or move a fake clock while it
// runs.
//
// Every script call goes through the node's hook, if any, as a Call; the
// hook decides whether and when Send reaches the wrapped node, and what
// the caller is told. Without a hook every call goes straight through.
package fakenode

import (
	"context"
	"errors"
	"sync"

	"github.com/quorumlock/redlock/driver"
)

// Op names the script a Call runs.
type Op string

// The scripts a hook sees, by name.
const (
	Acquire        Op = "acquire"
	Release        Op = "release"
	Extend         Op = "extend"
	AcquireFenced  Op = "acquire_fenced"
	RaiseFence     Op = "fence"
	AcquireMany    Op = "acquire_many"
	ReleaseMany    Op = "release_many"
	AcquireRead    Op = "acquire_read"
	ReleaseRead    Op = "release_read"
	ExtendRead     Op = "extend_read"
	AcquireWrite   Op = "acquire_write"
	Transfer       Op = "transfer"
	AcquireFair    Op = "acquire_fair"
	ReleaseFair    Op = "release_fair" // also a waiter leaving the queue (Token "")
	Peek           Op = "peek"
	RaiseReadFence Op = "fence_read"
)

// Result is what a call answers: the script's reply, or an error.
type Result struct {
	Reply any
	Err   error
}

// Call is one script call on its way to the wrapped node.
type Call struct {
	Op         Op
	Key, Token string // the first key and the first argument, if any
	Keys, Args []string
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

// Node wraps a driver.Node. It is a driver.Subscriber, passing
// subscriptions on to the wrapped node (the hook does not see them); use
// Silent to hide that.
type Node struct {
	inner driver.Node

	mu     sync.Mutex
	hook   Hook
	counts map[Op]int
	done   map[Op]int
}

// Wrap returns a Node over n, with no hook.
func Wrap(n driver.Node) *Node { return &Node{inner: n, counts: map[Op]int{}, done: map[Op]int{}} }

// WrapAll wraps every node of ns, returning the wrapped list for the
// lockers and the Nodes for the test.
func WrapAll(ns []driver.Node) ([]driver.Node, []*Node) {
	out := make([]driver.Node, len(ns))
	fakes := make([]*Node, len(ns))
	for i, n := range ns {
		fakes[i] = Wrap(n)
		out[i] = fakes[i]
	}
	return out, fakes
}

// Silent returns n as a node that cannot deliver release announcements:
// waiters on it sleep out their backoff delays.
func Silent(n *Node) driver.Node { return silent{n} }

type silent struct{ n *Node }

func (s silent) Info() driver.Info { return s.n.Info() }

func (s silent) Eval(ctx context.Context, script *driver.Script, keys []string, args ...string) (any, error) {
	return s.n.Eval(ctx, script, keys, args...)
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

// Info is the wrapped node's.
func (n *Node) Info() driver.Info { return n.inner.Info() }

// Eval passes the call through the hook.
func (n *Node) Eval(ctx context.Context, script *driver.Script, keys []string, args ...string) (any, error) {
	c := Call{Op: Op(script.Name()), Keys: keys, Args: args, send: func(ctx context.Context) Result {
		r, err := n.inner.Eval(ctx, script, keys, args...)
		return Result{Reply: r, Err: err}
	}}
	if len(keys) > 0 {
		c.Key = keys[0]
	}
	if len(args) > 0 {
		c.Token = args[0]
	}
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
	return r.Reply, r.Err
}

// Subscribe is the wrapped node's; the hook does not see it.
func (n *Node) Subscribe(ctx context.Context, deliver func(payload string), channels ...string) (func(), error) {
	return n.inner.(driver.Subscriber).Subscribe(ctx, deliver, channels...)
}
