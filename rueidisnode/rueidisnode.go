// Package rueidisnode adapts a github.com/redis/rueidis client to a
// redlock node (driver.Node): it runs the core's scripts through the
// client, and delivers release announcements to waiters
// (driver.Subscriber).
//
//	opt := rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}}
//	c, err := rueidis.NewClient(rueidisnode.Guard(opt))
//	...
//	defer c.Close()
//	node, err := rueidisnode.New(c)
//	...
//	locker, err := redlock.NewSingle(node)
//
// It is a module of its own, so that the redlock module does not depend
// on rueidis. Both adapters run the core's scripts on the same keys and
// channels: processes using go-redis (package goredis) and rueidis share
// servers and locks.
//
// # Never resent
//
// rueidis resends a command after a broken connection only when it is
// marked retryable (read-only commands, ToRetryable). The node's EVALSHA,
// EVAL and WAIT are not, so a lost reply is an error, never a second
// execution's answer, whatever ClientOption.DisableRetry says. EVAL
// follows EVALSHA only after NOSCRIPT, when nothing ran. One option
// breaks this, and New refuses it when it sees the options
// (WithClientOption): ConnLifetime, with which rueidis sends again any
// command unanswered when a connection's lifetime ends. Leave it at zero.
//
// Every call is bounded by its context's deadline (the lockers' per-node
// timeout); a cancellation before it ends a call that shares its
// connection with others, not always one alone on it.
//
// # Redis Cluster
//
// A client in cluster mode is one node: the whole cluster counts once
// toward a Redlock's quorum. The core maps a lock's keys into one hash
// slot and announces releases with SPUBLISH; the node waits for them with
// SSUBSCRIBE, over one connection per hash slot waited on. New needs
// WithClientOption for it. rueidis does not reload its slot map after a
// call cut short by its deadline: set ClusterOption.ShardsRefreshInterval
// (a few seconds) for a cluster whose masters can fail over.
//
// # Redis Sentinel
//
// A client in sentinel mode (ClientOption.Sentinel.MasterSet) is one
// node, whichever server the sentinels name master at the moment. New
// needs WithClientOption for it.
//
// # Replica acknowledgement
//
// Redis replicates asynchronously: a lock granted by a master that fails
// before its replica has the key is lost in the failover. With
// WithReplicaAck a script's success waits for its writes to reach
// replicas (WAIT on its connection).
package rueidisnode

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/redis/rueidis"
)

// Node is a rueidis client as one node of a lock.
type Node struct {
	c    rueidis.Client
	info driver.Info
	ack  *replicaAck // WithReplicaAck; nil without

	hub hub // standalone and sentinel clients

	mu   sync.Mutex
	hubs map[uint16]*hub // a cluster's, by hash slot; created on first use
}

var (
	_ driver.Node       = (*Node)(nil)
	_ driver.Subscriber = (*Node)(nil)
)

// New adapts c. A client in standalone mode must know one master and no
// replica, and is named after its address ("host:port"); databases of one
// server get the same name, so a Redlock refuses them as duplicates. A
// client in cluster or sentinel mode needs WithClientOption.
//
// New returns an error matching redlock.ErrInvalid for a nil client or
// option and for a client or options it refuses.
//
// Client-side caching is not used: set ClientOption.DisableCache for a
// server without CLIENT TRACKING. The node holds nothing of its own to
// close; closing the client closes every connection it used.
func New(c rueidis.Client, opts ...Option) (*Node, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: rueidisnode.New: nil client", redlock.ErrInvalid)
	}
	var o options
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: rueidisnode.New: nil option", redlock.ErrInvalid)
		}
		opt(&o)
	}
	name, err := o.name(c)
	if err != nil {
		return nil, err
	}
	ack, err := o.replicaAck(name)
	if err != nil {
		return nil, err
	}
	n := &Node{c: c, ack: ack, info: driver.Info{Name: name, ReplicaAck: ack != nil}, hub: hub{c: c}}
	if c.Mode() == rueidis.ClientModeCluster {
		n.info.Cluster = true
		n.hubs = map[uint16]*hub{}
	}
	return n, nil
}

// Info describes the node.
func (n *Node) Info() driver.Info { return n.info }

// Eval runs script by EVALSHA, and by EVAL when the node answers NOSCRIPT;
// with WithReplicaAck, each followed by WAIT on its connection.
func (n *Node) Eval(ctx context.Context, script *driver.Script, keys []string, args ...string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent
	}
	if n.info.Cluster {
		// rueidis panics on a command whose keys span slots.
		if err := oneSlot("keys", keys); err != nil {
			return nil, err
		}
	}
	r, err := n.run(ctx, n.c.B().Evalsha().Sha1(script.Hash()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if e, ok := errors.AsType[*replyError](err); ok && e.err.IsNoScript() {
		// NOSCRIPT: the node ran nothing, so sending EVAL is no resend.
		r, err = n.run(ctx, n.c.B().Eval().Script(script.Source()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return r, err
}

// run sends one script call, never resent (it is not marked retryable),
// and converts its reply.
func (n *Node) run(ctx context.Context, cmd rueidis.Completed) (r any, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, &clientPanic{value: p}
		}
	}()
	if n.ack != nil {
		return n.ack.run(ctx, n, cmd)
	}
	return value(n.c.Do(ctx, cmd))
}

// clientPanic is the error of a call that made rueidis panic, reading a
// reply on the caller's goroutine (a node answering garbage: a bulk length
// of 2^63-1). rueidis's own reading goroutine is out of the adapter's
// reach, and a connection whose read panicked may stay unusable.
type clientPanic struct{ value any }

func (e *clientPanic) Error() string {
	return fmt.Sprintf("rueidisnode: the node's reply could not be read (rueidis panicked: %v)", e.value)
}

// value converts a script's reply to the contract's types: an integer to
// int64, a string to string, a nil to nil, an array to []any of these
// (an error in it as an error); an error reply to a *replyError.
func value(r rueidis.RedisResult) (any, error) {
	if err := r.NonRedisError(); err != nil {
		return nil, err // the network, the deadline: the outcome is unknown
	}
	m, err := r.ToMessage()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, newReplyError(&m, err)
	}
	return convert(&m), nil
}

func convert(m *rueidis.RedisMessage) any {
	switch {
	case m.IsNil():
		return nil
	case m.IsInt64():
		v, _ := m.AsInt64()
		return v
	case m.IsString():
		v, _ := m.ToString()
		return v
	case m.IsArray():
		vs, _ := m.ToArray()
		out := make([]any, len(vs))
		for i := range vs {
			if err := vs[i].Error(); err != nil && !vs[i].IsNil() {
				out[i] = newReplyError(&vs[i], err)
				continue
			}
			out[i] = convert(&vs[i])
		}
		return out
	}
	// RESP3 types a script sends only after redis.setresp(3): boolean,
	// double, map, verbatim string, as rueidis reads them.
	v, _ := m.ToAny()
	return v
}

// replyError is an error reply of the node. Its text is the node's, in
// full: rueidis's RedisError, which it wraps, drops a leading "ERR ".
type replyError struct {
	text string
	err  *rueidis.RedisError
}

func newReplyError(m *rueidis.RedisMessage, err error) error {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return err
	}
	text, _ := m.ToString() // the message as read, before rueidis trims it
	if text == "" {
		text = re.Error()
	}
	return &replyError{text: text, err: re}
}

func (e *replyError) Error() string { return e.text }
func (e *replyError) Unwrap() error { return e.err }

// oneSlot refuses names (keys or channels) of more than one hash slot: on
// a cluster, a command's keys and a pub/sub connection's channels share
// one.
func oneSlot(what string, names []string) error {
	for _, s := range names[min(1, len(names)):] {
		if hashslot.Of(s) != hashslot.Of(names[0]) {
			return fmt.Errorf("%w: rueidisnode: %s %q and %q are in different hash slots", redlock.ErrInvalid, what, names[0], s)
		}
	}
	return nil
}

// Subscribe delivers the messages published on channels to deliver, over
// one shared pub/sub connection, open while someone waits (hub.go); on a
// cluster, one per hash slot, with SSUBSCRIBE.
func (n *Node) Subscribe(ctx context.Context, deliver func(payload string), channels ...string) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(channels) == 0 {
		return nil, fmt.Errorf("%w: rueidisnode: Subscribe to no channel", redlock.ErrInvalid)
	}
	h := &n.hub
	if n.info.Cluster {
		if err := oneSlot("channels", channels); err != nil {
			return nil, err
		}
		h = n.slotHub(hashslot.Of(channels[0]))
	}
	return h.notify(ctx, deliver, channels...)
}

// slotHub returns the hub of a cluster's hash slot: rueidis binds a
// dedicated cluster connection to the slot of its first command.
func (n *Node) slotHub(s uint16) *hub {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.hubs[s]
	if h == nil {
		h = &hub{c: n.c, sharded: true}
		n.hubs[s] = h
	}
	return h
}
