// Package goredis adapts a go-redis v9 client to a redlock node
// (driver.Node and driver.Subscriber):
//
//	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
//	node, err := goredis.New(c)
//	...
//	locker, err := redlock.NewSingle(node)
//
// Every command goes through the client (its hooks, pool and TLS apply),
// and a script call is never resent: a lost reply is an error. A cluster
// or failover client is one node; WithReplicaAck keeps a lock across a
// failover. See docs/backends.md.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/quorumlock/redlock/internal/subhub"
	"github.com/redis/go-redis/v9"
)

// Node is a go-redis client as one node of a lock.
type Node struct {
	c    redis.UniversalClient
	info driver.Info
	q    coalescer   // concurrent commands go out as one pipeline
	ack  *replicaAck // WithReplicaAck; nil without
	hub  hub         // standalone and failover clients

	mu     sync.Mutex
	hubs   map[uint16]*hub // a cluster's, by hash slot; created on first use
	closed bool
}

var (
	_ driver.Node       = (*Node)(nil)
	_ driver.Subscriber = (*Node)(nil)
)

// New adapts c: a *redis.Client of one master, named "host:port" (its
// databases are one node); a failover client, with WithFailover; or a
// *redis.ClusterClient, named "cluster[" + its seeds, sorted + "]". It
// refuses, with redlock.ErrInvalid, a nil client or option, a ring client,
// a failover client without WithFailover, and a client without
// ContextTimeoutEnabled, which the lockers' per-node deadlines need.
func New(c redis.UniversalClient, opts ...Option) (*Node, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: goredis.New: nil option", redlock.ErrInvalid)
		}
		opt(&o)
	}
	if err := checkClient(c); err != nil {
		return nil, err
	}
	name, err := o.name(c)
	if err != nil {
		return nil, err
	}
	ack, err := o.replicaAck(name)
	if err != nil {
		return nil, err
	}
	n := &Node{c: c, q: coalescer{c: c}, ack: ack, info: driver.Info{Name: name, ReplicaAck: ack != nil}}
	if _, ok := c.(*redis.ClusterClient); ok {
		n.info.Cluster = true
		n.hubs = map[uint16]*hub{}
	}
	n.hub.core.Linger = subscriptionLinger
	return n, nil
}

// checkClient refuses the clients the node cannot use.
func checkClient(c redis.UniversalClient) error {
	var timeouts bool
	switch c := c.(type) {
	case *redis.Client:
		if c == nil {
			return fmt.Errorf("%w: goredis.New: nil client", redlock.ErrInvalid)
		}
		timeouts = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		if c == nil {
			return fmt.Errorf("%w: goredis.New: nil client", redlock.ErrInvalid)
		}
		timeouts = c.Options().ContextTimeoutEnabled
	case nil:
		return fmt.Errorf("%w: goredis.New: nil client", redlock.ErrInvalid)
	default:
		return fmt.Errorf("%w: goredis.New: a %T cannot be one node of a lock: use a *redis.Client (one master, or a failover client) or a *redis.ClusterClient",
			redlock.ErrInvalid, c)
	}
	if !timeouts {
		return fmt.Errorf("%w: goredis.New: the go-redis client needs ContextTimeoutEnabled: true, so that the per-node timeout bounds each call",
			redlock.ErrInvalid)
	}
	return nil
}

// Info describes the node.
func (n *Node) Info() driver.Info { return n.info }

// Eval runs script by EVALSHA, and by EVAL when the node answers NOSCRIPT;
// with WithReplicaAck, each followed by WAIT on its connection.
func (n *Node) Eval(ctx context.Context, script *driver.Script, keys []string, args ...string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent
	}
	argv := make([]any, 3+len(keys)+len(args))
	argv[0], argv[1], argv[2] = "evalsha", script.Hash(), len(keys)
	for i, k := range keys {
		argv[3+i] = k
	}
	for i, a := range args {
		argv[3+len(keys)+i] = a
	}
	r, err := n.run(ctx, keys, argv)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// NOSCRIPT: the node ran nothing, so sending EVAL is no resend.
		argv[0], argv[1] = "eval", script.Source()
		r, err = n.run(ctx, keys, argv)
	}
	return r, err
}

// run sends one script call, never resent, and returns its reply.
func (n *Node) run(ctx context.Context, keys []string, argv []any) (any, error) {
	cmd := redis.NewCmd(ctx, argv...)
	var err error
	if n.ack != nil {
		err = n.ack.process(ctx, n, keys, cmd)
	} else {
		err = n.q.process(ctx, sendOnce{cmd})
	}
	if err == nil {
		err = cmd.Err()
	}
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil // a nil reply
	case err != nil && n.info.Cluster:
		// go-redis reloads its slot map after MOVED, not after a network
		// error of a NoRetry command: it would keep calling a dead master.
		n.c.(*redis.ClusterClient).ReloadState(context.Background())
		return nil, err
	case err != nil:
		return nil, err
	}
	return cmd.Val(), nil
}

// sendOnce marks a command, and a pipeline holding it, that go-redis must
// not resend (MaxRetries): a retry would answer for the first execution.
type sendOnce struct{ redis.Cmder }

func (sendOnce) NoRetry() bool { return true }

// Subscribe delivers the messages published on channels to deliver, over
// the node's pub/sub connection (hub.go), or a cluster slot's.
func (n *Node) Subscribe(ctx context.Context, deliver func(payload string), channels ...string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(channels) == 0 {
		return nil, fmt.Errorf("%w: goredis: Subscribe to no channel", redlock.ErrInvalid)
	}
	h, err := n.hubFor(channels)
	if err != nil {
		return nil, err
	}
	return h.core.Notify(ctx, channels, deliver, func(sub *subhub.Sub) subhub.Conn { return h.open(ctx, n.c, sub) })
}

// hubFor returns the node's hub, or a cluster's for the channels' slot.
func (n *Node) hubFor(channels []string) (*hub, error) {
	if n.hubs == nil {
		return &n.hub, nil
	}
	s := hashslot.Of(channels[0])
	for _, ch := range channels[1:] {
		if hashslot.Of(ch) != s {
			return nil, fmt.Errorf("%w: goredis: channels %q and %q are in different hash slots", redlock.ErrInvalid, channels[0], ch)
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.hubs[s]
	if h == nil {
		h = &hub{sharded: true}
		h.core.Linger = subscriptionLinger
		if n.closed {
			h.core.Close()
		}
		n.hubs[s] = h
	}
	return h, nil
}

// Close ends the subscriptions that linger after their last waiter; the
// client's Close closes the connections. The node works on after Close.
func (n *Node) Close() error {
	n.hub.core.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for _, h := range n.hubs {
		h.core.Close()
	}
	return nil
}

// clientName names a node after its address.
func clientName(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient: // sorted: one name per cluster, whatever the order
		addrs := slices.Compact(slices.Sorted(slices.Values(c.Options().Addrs)))
		return "cluster[" + strings.Join(addrs, " ") + "]"
	}
	return fmt.Sprintf("%T", c)
}
