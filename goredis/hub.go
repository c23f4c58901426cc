package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/subhub"
	"github.com/redis/go-redis/v9"
)

// hub multiplexes one node's release channels to the waiters in this
// process over a single pub/sub connection. Its two goroutines (one
// receives and dispatches, one writes SUBSCRIBE, UNSUBSCRIBE and PING)
// exist only while at least one waiter is subscribed: the last stop ends
// them within subscribeTimeout, so an idle backend holds no goroutine. It
// closes the connection too, unless the hub keeps it (keep: a node with
// a connection of its own, which has a Close): then the subscription
// lingers for subscriptionLinger after its last waiter, still subscribed
// to that waiter's channels (subhub's "Lingering"), its goroutines with
// it, and is then parked, subscribed to nothing, for the next waiter
// (see subscription.Close): its goroutines end within subscriptionLinger
// and subscribeTimeout after the last stop, or the node's Close.
// The zero hub is ready. The bookkeeping (which
// channels have waiters, which are subscribed, which await a numbered
// PING, dispatch) is package internal/subhub's, shared with the rueidis
// adapter; this file is the go-redis glue.
//
// Activation is exact. After writing a channel's SUBSCRIBE, the writer
// writes a PING with a payload of its own, numbered; the node answers
// commands on a connection in order, so its pong proves that every
// SUBSCRIBE written before it has taken effect, and only then are the
// channel's waiters told that they are subscribed. A "subscribe"
// confirmation is not used: after SUBSCRIBE, UNSUBSCRIBE, SUBSCRIBE of one
// channel, the first one's would arrive before the second SUBSCRIBE took
// effect. go-redis reconnects a dropped connection and resubscribes every
// channel before anything else is written on the new connection, so a
// pong received on it proves the resubscription too. A SUBSCRIBE the node
// refuses (an error reply, read before that pong) is no subscription: it
// fails the Notify calls it was written for (subhub.Sub.RefusedLocked).
//
// A Redis Cluster node has one hub per hash slot, in sharded mode
// (cluster.go): SSUBSCRIBE and SUNSUBSCRIBE on a connection to the slot's
// master, where the numbered PING confirms them just the same.
// When the slot moves to another master (a migration, a failover), its
// old master drops the slot's subscriptions (a sunsubscribe the hub did
// not ask for) or answers MOVED: the hub then opens a new connection,
// which go-redis dials to the slot's master after reloading its slot
// map, subscribes every channel there anew and, as after a drop, wakes
// every waiter with "" once a PING on it is answered (reopen).
//
// Dispatch never waits for a write. The hub's mutex guards the bookkeeping
// and is held by the receiving goroutine while it dispatches; writes are
// made by the writing goroutine without it. That goroutine is the only one
// writing, and writes what the bookkeeping says at the time it looks, so
// SUBSCRIBE and UNSUBSCRIBE of one channel reach the node in the order of
// the bookkeeping. (go-redis's PubSub has a mutex of its own that a write
// holds and that Receive takes after every read, so a write stuck in the
// kernel still delays reception, for at most subscribeTimeout.)
//
// After a dropped connection, releases published before go-redis
// resubscribed were missed. Once a PING written after the drop is
// answered, every waiter is called with payload "": a release may have
// happened.
type hub struct {
	core subhub.Hub

	// sharded makes the hub subscribe with SSUBSCRIBE and SUNSUBSCRIBE
	// (a Redis Cluster node's hub, one per hash slot, see cluster.go).
	sharded bool

	// wrap, when set (by tests), stands between the hub and go-redis.
	wrap func(pubSub) pubSub

	// keep has the last waiter park the connection instead of closing
	// it (see subscription.Close): set for a node with a connection of
	// its own, whose Close closes the parked one too.
	keep   bool
	idleMu sync.Mutex
	idle   pubSub // parked: subscribed to nothing, no reply pending; nil if none
	closed bool   // the node was closed: nothing is parked any more
}

// take returns the parked connection, if any, and unparks it.
func (h *hub) take() pubSub {
	h.idleMu.Lock()
	defer h.idleMu.Unlock()
	ps := h.idle
	h.idle = nil
	return ps
}

// put parks ps; false if the node was closed or a connection is parked
// already (the caller closes ps).
func (h *hub) put(ps pubSub) bool {
	h.idleMu.Lock()
	defer h.idleMu.Unlock()
	if h.closed || h.idle != nil {
		return false
	}
	h.idle = ps
	return true
}

// close closes the parked connection, and any parked later; the node's
// Close calls it.
func (h *hub) close() error {
	h.core.Close() // a lingering subscription, which parks its connection, or closes it once h is closed
	h.idleMu.Lock()
	ps := h.idle
	h.idle, h.closed = nil, true
	h.idleMu.Unlock()
	if ps == nil {
		return nil
	}
	return ps.Close()
}

// pubSub is what the hub uses of a *redis.PubSub.
type pubSub interface {
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	Ping(ctx context.Context, payload ...string) error
	Receive(ctx context.Context) (any, error)
	Close() error
}

// shardedPubSub is a *redis.PubSub whose Subscribe and Unsubscribe are
// SSUBSCRIBE and SUNSUBSCRIBE. Over a ClusterClient, go-redis opens it on
// the master of its first channel's slot, and reopens it there after a
// drop (resubscribing every channel in one SSUBSCRIBE, which a cluster
// refuses with CROSSSLOT unless they share a slot: hence one hub per slot).
type shardedPubSub struct{ *redis.PubSub }

func (p shardedPubSub) Subscribe(ctx context.Context, channels ...string) error {
	return p.SSubscribe(ctx, channels...)
}

func (p shardedPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	return p.SUnsubscribe(ctx, channels...)
}

// subscription is one pub/sub connection: the glue of a subhub.Sub,
// whose bookkeeping is guarded by the hub's core mutex.
type subscription struct {
	*subhub.Sub
	psMu   sync.Mutex      // guards ps and closed
	ps     pubSub          // replaced by reopen (a sharded hub whose slot moved)
	closed bool            // the last waiter left: ps is not replaced any more
	open   func() pubSub   // a new connection, as the first
	reload func()          // has a cluster client reload its slot map; nil otherwise
	ctx    context.Context // the goroutines', cancelled when the Sub ends
	cancel context.CancelFunc
	// park, when set, takes the connection back once it subscribes to
	// nothing (hub.put): the last waiter parks it instead of closing it.
	park     func(pubSub) bool
	written  chan struct{} // closed when the writer returned
	received chan struct{} // closed when the receiver returned
	drained  bool          // the receiver read the park PING's pong (read once received is closed)
	unparked bool          // the connection was parked, and the writer has not written on it yet (the writer's)
	// dialled, for a sharded hub, is closed once the writer has written
	// its first round on the current connection, whose SSUBSCRIBE dials
	// it: receive waits for it, or go-redis, asked to read before any
	// channel is known, would dial a random node of the cluster. Guarded
	// by the hub's core mutex.
	dialled chan struct{}
	wg      sync.WaitGroup
}

// receivePause and maxReceivePause bound the pauses between reconnection
// attempts of a subscription whose node went away, and between retries of
// a write that failed.
const (
	receivePause    = 50 * time.Millisecond
	maxReceivePause = time.Second
)

// subscriptionLinger is how long the subscription of a hub that keeps
// its connection stays up after its last waiter left (subhub.Hub.Linger):
// a process that waits on the same key again within it is subscribed at
// once, which with several processes taking turns on a key saves every
// wait a SUBSCRIBE, its PING, an UNSUBSCRIBE and the PING that parks the
// connection, per node (BENCHMARKS.md, "A subscription that lingers").
// Meanwhile its receiver reads what the node publishes on the channels
// kept, and drops it.
const subscriptionLinger = 250 * time.Millisecond

// subscribeTimeout bounds each round of SUBSCRIBE, UNSUBSCRIBE and PING
// writes, which are made for all waiters and so without a caller's
// context.
const subscribeTimeout = time.Second

// pingPrefix starts the payload of the hub's PINGs, followed by their
// number.
const pingPrefix = "redlock:hub:"

// parkPing is the payload of the PING that follows the UNSUBSCRIBE of
// every channel when the connection is parked: its pong is the last reply
// the connection owes.
const parkPing = "redlock:park"

// notify subscribes released to channels, all in one round of writes
// (subhub.Hub.Notify).
func (h *hub) notify(ctx context.Context, c redis.UniversalClient, released func(string), channels ...string) (func(), error) {
	return h.core.Notify(ctx, channels, released, func(sub *subhub.Sub) subhub.Conn {
		return h.open(ctx, c, sub)
	})
}

// open starts the connection and goroutines of a new subhub.Sub; called
// with the core's mutex held.
func (h *hub) open(ctx context.Context, c redis.UniversalClient, sub *subhub.Sub) *subscription {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	open := func() pubSub {
		var ps pubSub
		if h.sharded {
			ps = shardedPubSub{c.SSubscribe(rctx)}
		} else {
			ps = c.Subscribe(rctx)
		}
		if h.wrap != nil {
			ps = h.wrap(ps)
		}
		return ps
	}
	ps := h.take()
	unparked := ps != nil
	if ps == nil {
		ps = open()
	}
	s := &subscription{Sub: sub, ps: ps, open: open, reload: reloadSlots(c), ctx: rctx, cancel: cancel,
		written: make(chan struct{}), received: make(chan struct{}), unparked: unparked}
	if h.sharded {
		s.dialled = make(chan struct{})
	}
	if h.keep { // never a sharded hub: a cluster node has no connection of its own
		s.park = h.put
	}
	s.wg.Add(2)
	go s.receive(&h.core, h.sharded)
	go s.write(&h.core)
	return s
}

// Close is called by the last waiter to leave, once Closing is closed.
// Closing the connection waits for a write in progress (go-redis's PubSub
// holds its mutex while writing, and a write to a node that stalls while
// the connection is re-dialled lasts up to subscribeTimeout). The waiter
// that leaves last must not pay for that: for a Lock that has just been
// granted it would come out of the lock's validity. So the connection is
// closed, and its goroutines waited for, on a goroutine of its own, which
// ends within subscribeTimeout.
//
// A hub that keeps its connection (hub.keep) parks it instead, on that
// goroutine too: once the writer returned, it unsubscribes every channel
// and PINGs; the receiver, reading that PING's pong, has read every reply
// the connection owed and returns, and the connection, subscribed to
// nothing and owing nothing, waits unread for the hub's next waiter
// (hub.take), which saves it a dial and a greeting. If any of that fails,
// or takes longer than subscribeTimeout, the connection is closed as
// above. The goroutine then ends within twice subscribeTimeout.
func (s *subscription) Close() {
	if s.park != nil {
		go s.parkOrClose()
		return
	}
	s.cancel() // abandons a dial in progress
	go func() {
		s.closeConn()
		s.wg.Wait()
	}()
}

// closeConn closes the current connection, which is not replaced any
// more.
func (s *subscription) closeConn() {
	s.psMu.Lock()
	s.closed = true
	ps := s.ps
	s.psMu.Unlock()
	_ = ps.Close()
}

// parkOrClose parks the connection, or closes it (see Close).
func (s *subscription) parkOrClose() {
	defer s.wg.Wait()
	defer s.cancel()
	<-s.written // within subscribeTimeout: the writer returns after its write in progress
	ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
	defer cancel()
	ps := s.pubSub()
	err := ps.Unsubscribe(ctx) // every channel
	if err == nil {
		err = ps.Ping(ctx, parkPing)
	}
	if err == nil {
		select {
		case <-s.received: // with the pong, or after an error
			if s.drained && s.park(ps) {
				return
			}
		case <-ctx.Done():
		}
	}
	s.closeConn()
}

// write is the writing goroutine: it brings the node in line with the
// bookkeeping whenever woken, and retries after a pause while a round
// failed, until the subscription closes.
func (s *subscription) write(mu sync.Locker) {
	defer s.wg.Done()
	defer close(s.written)
	pause := receivePause
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-s.Closing:
			return
		case <-s.Kick:
		case <-retry.C:
		}
		mu.Lock()
		p := s.PlanLocked()
		mu.Unlock()
		if p.Empty() {
			continue
		}
		err := s.flush(p)
		unparked := s.unparked
		s.unparked = false
		mu.Lock()
		if s.dialled != nil {
			close(s.dialled) // go-redis now knows a channel to route by
			s.dialled = nil
		}
		mu.Unlock()
		if err != nil && unparked {
			// The first write on a parked connection failed: the server
			// closed it meanwhile (its idle timeout, a CLIENT KILL).
			// go-redis redials at the next write, and resubscribes what
			// was written first; that write's PING confirms it.
			mu.Lock()
			s.ResyncLocked()
			mu.Unlock()
			s.Wake()
			continue
		}
		if err != nil {
			mu.Lock()
			s.FailedLocked(p, err) // go-redis reconnects after a failed write
			mu.Unlock()
			retry.Reset(pause)
			pause = min(2*pause, maxReceivePause)
			continue
		}
		pause = receivePause
	}
}

// flush writes one round. Every write is attempted even after one failed,
// so go-redis's own list of channels, which it resubscribes after a
// reconnect, matches what was planned.
func (s *subscription) flush(p subhub.Plan) error {
	ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
	defer cancel()
	ps := s.pubSub()
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if len(p.Unsubscribe) > 0 {
		keep(ps.Unsubscribe(ctx, p.Unsubscribe...))
	}
	if len(p.Subscribe) > 0 {
		keep(ps.Subscribe(ctx, p.Subscribe...))
	}
	if p.Ping != 0 {
		keep(ps.Ping(ctx, pingPrefix+strconv.FormatUint(p.Ping, 10)))
	}
	return first
}

// receive dispatches the node's messages to the waiters until the
// subscription closes. mu is the hub's mutex.
func (s *subscription) receive(mu sync.Locker, sharded bool) {
	defer s.wg.Done()
	defer close(s.received)
	pause := receivePause
	for {
		if sharded && !s.waitDialled(mu) {
			return
		}
		msg, err := s.pubSub().Receive(s.ctx)
		if err != nil {
			select {
			case <-s.Closing:
				return
			default:
			}
			moved := false
			if rerr, ok := errors.AsType[redis.Error](err); ok {
				// The node refused a command (a SUBSCRIBE denied by an
				// ACL, an SSUBSCRIBE answered MOVED after the slot
				// moved): the PING that follows it will be answered, but
				// must not confirm a subscription that may not exist.
				mu.Lock()
				s.RefusedLocked(func(name string) error {
					return fmt.Errorf("goredis: subscribing to %s: %w", name, err)
				})
				mu.Unlock()
				moved = sharded && strings.HasPrefix(rerr.Error(), "MOVED ")
			}
			// go-redis reconnects and resubscribes, in this Receive or the
			// next, or in the next write; what was published meanwhile is
			// lost. The writer's next PING tells when it is over.
			mu.Lock()
			s.ResyncLocked()
			mu.Unlock()
			s.Wake()
			t := time.NewTimer(pause)
			select {
			case <-s.Closing:
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, maxReceivePause)
			if moved {
				s.reopen(mu) // the slot has another master now
			}
			continue
		}
		pause = receivePause
		mu.Lock()
		dropped := false
		switch m := msg.(type) {
		case *redis.Subscription:
			// A sunsubscribe for a channel with waiters that the writer
			// did not ask for: the node no longer owns the slot (it
			// migrated, or the node was demoted) and dropped the slot's
			// subscriptions. The connection is of no more use to the hub.
			dropped = sharded && m.Kind == "sunsubscribe" && s.DroppedLocked(m.Channel)
		case *redis.Message:
			s.DispatchLocked(m.Channel, m.Payload)
		case *redis.Pong:
			if m.Payload == parkPing {
				// The last reply: the connection is parked now (Close),
				// and must not be read by this goroutine any more.
				s.drained = true
				mu.Unlock()
				return
			}
			if n, ok := strings.CutPrefix(m.Payload, pingPrefix); ok {
				if seq, err := strconv.ParseUint(n, 10, 64); err == nil {
					s.PongLocked(seq)
				}
			}
		}
		mu.Unlock()
		if dropped {
			s.reopen(mu)
		}
	}
}

// reloadSlots returns what makes c reload its slot map: nil unless c is a
// cluster client.
func reloadSlots(c redis.UniversalClient) func() {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return nil
	}
	return func() { cc.ReloadState(context.Background()) }
}

// pubSub returns the current pub/sub connection.
func (s *subscription) pubSub() pubSub {
	s.psMu.Lock()
	defer s.psMu.Unlock()
	return s.ps
}

// waitDialled waits until the writer has written a round on the current
// connection of a sharded hub; false when the subscription closed.
func (s *subscription) waitDialled(mu sync.Locker) bool {
	mu.Lock()
	dialled := s.dialled
	mu.Unlock()
	if dialled == nil {
		return true
	}
	select {
	case <-dialled:
		return true
	case <-s.Closing:
		return false
	}
}

// reopen replaces the pub/sub connection of a sharded hub whose slot
// moved to another master (the node dropped its subscriptions, or
// answered MOVED): it has the cluster client reload its slot map, opens a
// new connection, which the writer's next round dials to the slot's
// master as the client then knows it, and has every channel subscribed
// there anew, followed by a PING whose pong wakes every waiter with "",
// since a release may have been missed meanwhile. Called by the receiving
// goroutine, without the hub's mutex.
func (s *subscription) reopen(mu sync.Locker) {
	if s.reload != nil {
		s.reload()
	}
	fresh := s.open()
	mu.Lock()
	s.psMu.Lock()
	if s.closed {
		s.psMu.Unlock()
		mu.Unlock()
		_ = fresh.Close()
		return
	}
	old := s.ps
	s.ps = fresh
	s.psMu.Unlock()
	s.LostLocked() // every channel anew on the new connection, then a PING
	s.dialled = make(chan struct{})
	mu.Unlock()
	_ = old.Close()
	s.Wake()
}
