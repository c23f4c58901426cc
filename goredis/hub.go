package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/go-redis/v9"
)

// hub multiplexes one node's release channels to the waiters in this
// process over a single pub/sub connection. The connection and its two
// goroutines (one receives and dispatches, one writes SUBSCRIBE,
// UNSUBSCRIBE and PING) exist only while at least one waiter is
// subscribed: the last stop closes them, and they end within
// subscribeTimeout, so an idle backend holds no goroutine and needs no
// Close. The zero hub is ready.
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
// fails the Notify calls it was written for (refusedLocked).
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
	mu  sync.Mutex
	sub *subscription // nil while nobody waits

	// sharded makes the hub subscribe with SSUBSCRIBE and SUNSUBSCRIBE
	// (a Redis Cluster node's hub, one per hash slot, see cluster.go).
	sharded bool

	// wrap, when set (by tests), stands between the hub and go-redis.
	wrap func(pubSub) pubSub
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

// subscription is one pub/sub connection and what it is subscribed to.
// Its maps and counters are guarded by the hub's mutex.
type subscription struct {
	psMu    sync.Mutex      // guards ps and closed
	ps      pubSub          // replaced by reopen (a sharded hub whose slot moved)
	closed  bool            // the last waiter left: ps is not replaced any more
	open    func() pubSub   // a new connection, as the first
	reload  func()          // has a cluster client reload its slot map; nil otherwise
	ctx     context.Context // the goroutines', cancelled with the last waiter
	cancel  context.CancelFunc
	closing chan struct{} // closed when the last waiter left
	kick    chan struct{} // capacity 1: the writer has something to do
	// dialled, for a sharded hub, is closed once the writer has written
	// its first round on the current connection, whose SSUBSCRIBE dials
	// it: receive waits for it, or go-redis, asked to read before any
	// channel is known, would dial a random node of the cluster. Guarded
	// by the hub's mutex.
	dialled chan struct{}
	wg      sync.WaitGroup

	channels map[string]*channelWaiters // the channels that have waiters
	written  map[string]bool            // the channels SUBSCRIBEd, as last written
	refused  map[string]bool            // SUBSCRIBEd, but the node may have refused it
	waiters  int
	pings    uint64 // the number of the last PING planned
	resync   bool   // the connection dropped: a PING must follow
	resyncAt uint64 // the PING whose pong ends the resynchronisation; 0 if none
}

type channelWaiters struct {
	active  chan struct{} // closed when confirmed or failed
	ok      bool          // confirmed: the node has the SUBSCRIBE
	err     error         // set before active is closed when writing failed
	ping    uint64        // the PING whose pong confirms it; 0 until written
	waiters map[*listener]struct{}
}

// listener is one Notify registration.
type listener struct {
	released func(payload string)
	cw       *channelWaiters
}

// receivePause and maxReceivePause bound the pauses between reconnection
// attempts of a subscription whose node went away, and between retries of
// a write that failed.
const (
	receivePause    = 50 * time.Millisecond
	maxReceivePause = time.Second
)

// subscribeTimeout bounds each round of SUBSCRIBE, UNSUBSCRIBE and PING
// writes, which are made for all waiters and so without a caller's
// context.
const subscribeTimeout = time.Second

// pingPrefix starts the payload of the hub's PINGs, followed by their
// number.
const pingPrefix = "redlock:hub:"

func (h *hub) notify(ctx context.Context, c redis.UniversalClient, key string, released func(string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := redlock.ReleaseChannel(key)
	h.mu.Lock()
	if h.sub == nil {
		h.sub = h.open(ctx, c)
	}
	s := h.sub
	s.waiters++
	cw := s.channels[name]
	fresh := cw == nil
	if fresh {
		cw = &channelWaiters{active: make(chan struct{}), waiters: map[*listener]struct{}{}}
		s.channels[name] = cw
	}
	me := &listener{released: released, cw: cw}
	cw.waiters[me] = struct{}{}
	ok := cw.ok
	h.mu.Unlock()
	if fresh {
		s.wake()
	}

	var once sync.Once
	stop := func() { once.Do(func() { h.leave(s, name, me) }) }
	if ok {
		return stop, nil
	}
	var err error
	select {
	case <-cw.active:
		if err = cw.err; err == nil {
			return stop, nil
		}
	case <-ctx.Done():
		err = ctx.Err()
	}
	stop()
	return nil, err
}

// open starts a subscription and its goroutines; called with h.mu held.
func (h *hub) open(ctx context.Context, c redis.UniversalClient) *subscription {
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
	s := &subscription{ps: open(), open: open, reload: reloadSlots(c), ctx: rctx, cancel: cancel, closing: make(chan struct{}),
		kick: make(chan struct{}, 1), channels: map[string]*channelWaiters{}, written: map[string]bool{},
		refused: map[string]bool{}}
	if h.sharded {
		s.dialled = make(chan struct{})
	}
	s.wg.Add(2)
	go s.receive(&h.mu, h.sharded)
	go s.write(&h.mu)
	return s
}

// wake tells the writer to look at the bookkeeping.
func (s *subscription) wake() {
	select {
	case s.kick <- struct{}{}:
	default: // it will look anyway
	}
}

// leave removes a waiter; the last one of a channel has the writer
// unsubscribe it, the last one of all has the connection closed. It never
// waits for the network, and once it returns, released is not called for
// me: dispatch runs under the hub's mutex, and me is out of the
// bookkeeping.
func (h *hub) leave(s *subscription, name string, me *listener) {
	h.mu.Lock()
	cw := me.cw
	delete(cw.waiters, me)
	s.waiters--
	last := s.waiters == 0
	unsubscribe := false
	if last {
		h.sub = nil // the next waiter starts a new connection
	} else if len(cw.waiters) == 0 && s.channels[name] == cw {
		delete(s.channels, name)
		unsubscribe = true
	}
	h.mu.Unlock()
	if unsubscribe {
		s.wake()
	}
	if last {
		close(s.closing)
		s.cancel() // abandons a dial in progress
		// Closing waits for a write in progress (go-redis's PubSub holds
		// its mutex while writing, and a write to a node that stalls while
		// the connection is re-dialled lasts up to subscribeTimeout). The
		// waiter that leaves last must not pay for that: for a Lock that
		// has just been granted it would come out of the lock's validity.
		// So the connection is closed, and its goroutines waited for, on a
		// goroutine of its own, which ends within subscribeTimeout.
		go func() {
			s.psMu.Lock()
			s.closed = true
			ps := s.ps
			s.psMu.Unlock()
			_ = ps.Close()
			s.wg.Wait()
		}()
	}
}

// plan is one round of writes.
type plan struct {
	subscribe, unsubscribe []string
	ping                   uint64 // 0: no PING
}

// planLocked, called with the hub's mutex held, compares the channels that
// have waiters with the ones written, and plans the writes that bring the
// node in line, followed by a PING if a channel or a resynchronisation
// awaits confirmation.
func (s *subscription) planLocked() plan {
	var p plan
	confirm := s.resync
	for name := range s.refused {
		delete(s.refused, name)
		if s.channels[name] == nil { // off go-redis's list, which it resubscribes
			p.unsubscribe = append(p.unsubscribe, name)
		}
	}
	for name, cw := range s.channels {
		if !s.written[name] {
			s.written[name] = true
			p.subscribe = append(p.subscribe, name)
		}
		if !cw.ok && cw.ping == 0 {
			confirm = true
		}
	}
	for name := range s.written {
		if s.channels[name] == nil {
			delete(s.written, name)
			p.unsubscribe = append(p.unsubscribe, name)
		}
	}
	if !confirm {
		return p
	}
	s.pings++
	p.ping = s.pings
	for _, cw := range s.channels {
		if !cw.ok && cw.ping == 0 {
			cw.ping = p.ping
		}
	}
	if s.resync {
		s.resync, s.resyncAt = false, p.ping
	}
	return p
}

// failedLocked, called with the hub's mutex held after a round of writes
// failed, fails the channels that round was to confirm (their Notify
// calls return the error; later ones start afresh) and asks for a
// resynchronisation: go-redis reconnects after a failed write.
func (s *subscription) failedLocked(p plan, err error) {
	if p.ping != 0 {
		for name, cw := range s.channels {
			if !cw.ok && cw.ping == p.ping {
				cw.err = err
				close(cw.active)
				delete(s.channels, name) // still in s.written: unsubscribed later
			}
		}
	}
	s.resync, s.resyncAt = true, 0
}

// refusedLocked, called with the hub's mutex held after the node replied
// with an error, fails every channel whose SUBSCRIBE was written and not
// yet confirmed: replies come in order, so the refused command is one of
// theirs (or an UNSUBSCRIBE, and failing them is then merely cautious).
// Their Notify calls return the error. They count as not written, so that
// a new waiter's SUBSCRIBE is written again, and as refused, so that they
// are unsubscribed if nobody waits for them any more.
func (s *subscription) refusedLocked(err error) {
	for name, cw := range s.channels {
		if !cw.ok && cw.ping != 0 {
			cw.err = fmt.Errorf("goredis: subscribing to %s: %w", name, err)
			close(cw.active)
			delete(s.channels, name)
			delete(s.written, name)
			s.refused[name] = true
		}
	}
	s.wake()
}

// write is the writing goroutine: it brings the node in line with the
// bookkeeping whenever woken, and retries after a pause while a round
// failed, until the subscription closes.
func (s *subscription) write(mu *sync.Mutex) {
	defer s.wg.Done()
	pause := receivePause
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-s.kick:
		case <-retry.C:
		}
		mu.Lock()
		p := s.planLocked()
		mu.Unlock()
		if p.ping == 0 && len(p.unsubscribe) == 0 {
			continue
		}
		err := s.flush(p)
		mu.Lock()
		if s.dialled != nil {
			close(s.dialled) // go-redis now knows a channel to route by
			s.dialled = nil
		}
		mu.Unlock()
		if err != nil {
			mu.Lock()
			s.failedLocked(p, err)
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
func (s *subscription) flush(p plan) error {
	ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
	defer cancel()
	ps := s.pubSub()
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if len(p.unsubscribe) > 0 {
		keep(ps.Unsubscribe(ctx, p.unsubscribe...))
	}
	if len(p.subscribe) > 0 {
		keep(ps.Subscribe(ctx, p.subscribe...))
	}
	if p.ping != 0 {
		keep(ps.Ping(ctx, pingPrefix+strconv.FormatUint(p.ping, 10)))
	}
	return first
}

// receive dispatches the node's messages to the waiters until the
// subscription closes. mu is the hub's mutex.
func (s *subscription) receive(mu *sync.Mutex, sharded bool) {
	defer s.wg.Done()
	pause := receivePause
	for {
		if sharded && !s.waitDialled(mu) {
			return
		}
		msg, err := s.pubSub().Receive(s.ctx)
		if err != nil {
			select {
			case <-s.closing:
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
				s.refusedLocked(err)
				mu.Unlock()
				moved = sharded && strings.HasPrefix(rerr.Error(), "MOVED ")
			}
			// go-redis reconnects and resubscribes, in this Receive or the
			// next, or in the next write; what was published meanwhile is
			// lost. The writer's next PING tells when it is over.
			mu.Lock()
			s.resync, s.resyncAt = true, 0
			mu.Unlock()
			s.wake()
			t := time.NewTimer(pause)
			select {
			case <-s.closing:
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
			dropped = sharded && m.Kind == "sunsubscribe" && s.channels[m.Channel] != nil && s.written[m.Channel]
		case *redis.Message:
			if cw := s.channels[m.Channel]; cw != nil {
				for w := range cw.waiters {
					w.released(m.Payload)
				}
			}
		case *redis.Pong:
			if n, ok := strings.CutPrefix(m.Payload, pingPrefix); ok {
				if seq, err := strconv.ParseUint(n, 10, 64); err == nil {
					s.pongLocked(seq)
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
func (s *subscription) waitDialled(mu *sync.Mutex) bool {
	mu.Lock()
	dialled := s.dialled
	mu.Unlock()
	if dialled == nil {
		return true
	}
	select {
	case <-dialled:
		return true
	case <-s.closing:
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
func (s *subscription) reopen(mu *sync.Mutex) {
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
	clear(s.written)
	for _, cw := range s.channels {
		if !cw.ok {
			cw.ping = 0 // its PING went to the old connection
		}
	}
	s.resync, s.resyncAt = true, 0
	s.dialled = make(chan struct{})
	mu.Unlock()
	_ = old.Close()
	s.wake()
}

// pongLocked, called with the hub's mutex held, handles the pong of PING
// seq: everything written before it took effect.
func (s *subscription) pongLocked(seq uint64) {
	if s.resyncAt != 0 && seq >= s.resyncAt {
		// Resubscribed after a drop: a release may have been missed.
		s.resyncAt = 0
		for _, cw := range s.channels {
			if cw.ok {
				for w := range cw.waiters {
					w.released("")
				}
			}
		}
	}
	for _, cw := range s.channels {
		if !cw.ok && cw.ping != 0 && cw.ping <= seq {
			cw.ok = true
			close(cw.active)
		}
	}
}
