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
	"strconv"
	"strings"
	"sync"
	"unsafe"

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
//
// New adds a dial hook to c: every connection c dials from then on (a
// cluster client's: every node it creates from then on) ends, with an
// error naming what was refused, when the node sends what no Redis
// server sends: a string over 512 MiB, an aggregate over 2^24 elements,
// a length below -1, a byte that is no RESP type, or a reply to no
// command. Without it go-redis allocates whatever length it reads (the
// process dies out of memory) and may hand a stale reply to the next
// command. Create the node before the client's first command, so that no
// connection predates the hook.
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
	guard(c)
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
	r, err := n.run(ctx, keys, newEvalCmd(ctx, "evalsha", script.Hash(), keys, args))
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// NOSCRIPT: the node ran nothing, so sending EVAL is no resend.
		r, err = n.run(ctx, keys, newEvalCmd(ctx, "eval", script.Source(), keys, args))
	}
	return r, err
}

// run sends one script call, never resent, and returns its reply.
func (n *Node) run(ctx context.Context, keys []string, cmd *evalCmd) (any, error) {
	var err error
	if n.ack != nil {
		err = n.ack.process(ctx, n, keys, cmd)
	} else {
		err = n.q.process(ctx, cmd)
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
		return nil, n.explain(err)
	case err != nil:
		return nil, n.explain(err)
	}
	return cmd.Val(), nil
}

// evalInline is how many strings (the script's hash or source, its keys
// and arguments) an evalCmd holds without allocating more: those of the
// scripts of a plain or fenced lock on one key (acquire, extend, raise the
// fence, release); the others cost two allocations more.
const evalInline = 6

// evalCmd is one script call, made in two allocations (itself and its
// redis.Cmd) however many keys and arguments it has, where boxing each
// string into the command's []any would cost one each: argv holds the
// verb, the number of keys and a strArg per string, which points at the
// call's own copy of it in strs (not at the caller's slices, which the
// caller owns again once Eval returns, while a command given up in flight
// is still written by the coalescer's sender). It is a pointer, so it is a
// redis.Cmder without boxing too; it is never resent (NoRetry): a retry
// would answer for the first execution.
type evalCmd struct {
	*redis.Cmd
	argv [3 + evalInline]any
	strs [evalInline]string
}

func (*evalCmd) NoRetry() bool { return true }

// newEvalCmd makes the command verb (the constant "evalsha" or "eval",
// boxed without allocating) of script (its hash or source), keys, args.
func newEvalCmd(ctx context.Context, verb any, script string, keys, args []string) *evalCmd {
	c := new(evalCmd)
	strs, argv := c.strs[:0], c.argv[:0]
	if n := 1 + len(keys) + len(args); n > evalInline {
		strs, argv = make([]string, 0, n), make([]any, 0, 2+n)
	}
	strs = append(append(append(strs, script), keys...), args...)
	argv = append(argv, verb, strArg{&strs[0]}, numKeys(len(keys)))
	for i := 1; i < len(strs); i++ {
		argv = append(argv, strArg{&strs[i]})
	}
	c.Cmd = redis.NewCmd(ctx, argv...)
	return c
}

// strArg is a string argument of a command that go-redis writes as the
// string (encoding.BinaryMarshaler, without a copy) and hooks print as it
// (fmt.Stringer). Holding only a pointer, it is stored in an interface
// without the allocation that boxing a string costs.
type strArg struct{ s *string }

// MarshalBinary returns the string's bytes, which go-redis only writes
// to the connection: they must not be modified.
func (a strArg) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(*a.s), len(*a.s)), nil
}

func (a strArg) String() string { return *a.s }

// smallCounts are the numbers of keys as EVAL's argument, boxed once:
// a string, which go-redis reads without formatting when it looks for a
// cluster command's first key.
var smallCounts = func() (a [16]any) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

// numKeys is EVAL's number of keys.
func numKeys(n int) any {
	if n < len(smallCounts) {
		return smallCounts[n]
	}
	return strconv.Itoa(n)
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
