// Package subhub is the client-independent core of the adapters' release
// hubs (goredis/hub.go, rueidisnode/hub.go): the bookkeeping that
// multiplexes one node's release channels to the waiters in a process
// over one pub/sub connection. It knows which channels have waiters,
// which were written (SUBSCRIBEd) on the current connection, and which
// await confirmation by a numbered PING; it plans the writes that bring
// the node in line, and dispatches messages. The adapters keep only their
// client glue: opening the connection, writing a Plan, reading replies.
//
// Activation is exact: a channel's waiters are told that they are
// subscribed only once a PING written after its SUBSCRIBE is answered
// (Pong), since the node answers a connection's commands in order. After a
// connection dropped (Lost, Resync), releases may have been missed: once a
// PING written after it is answered, every waiter of an active channel is
// called with payload "".
//
// Everything on a Sub is guarded by its Hub's mutex: the methods named
// ...Locked are called with it held (Hub.Lock), and dispatch holds it
// while it calls the waiters, so that once stop returns its callback is
// not called again.
package subhub

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Hub is one node's (or one hash slot's) hub. The zero Hub is ready.
type Hub struct {
	// Linger, when positive, keeps a Sub running for that long after its
	// last waiter left (see "Lingering"); set before the first Notify.
	Linger time.Duration

	mu     sync.Mutex
	sub    *Sub // nil while nobody waits and no Sub lingers
	closed bool // Close was called: no Sub lingers any more
}

// Lingering. A process most often waits on the key it waited on last (a
// worker that hands a lock on and asks for it again). With Hub.Linger
// set, the last waiter to leave does not close the Sub: it keeps
// running for Linger, its connection still subscribed to the last
// waiter's channels (the confirmed ones, if there are at most
// maxLingering), its receiver reading and dropping what is published on
// them. A waiter that comes meanwhile joins it, and on one of those
// channels is subscribed at once: per wait, no SUBSCRIBE, PING or
// UNSUBSCRIBE is written, and no connection's goroutines are started
// and stopped. Once Linger passes with nobody waiting, or on Close, the
// Sub closes as it would have without Linger. Its goroutines thus
// outlive the last waiter by Linger at most (and what Conn.Close then
// takes).
const maxLingering = 4

// Lock and Unlock take and release the hub's mutex, which guards its Subs.
func (h *Hub) Lock()   { h.mu.Lock() }
func (h *Hub) Unlock() { h.mu.Unlock() }

// Current returns the running Sub (a lingering one too), nil while
// nobody waits and none lingers.
func (h *Hub) Current() *Sub {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sub
}

// Conn is an adapter's side of a Sub: its connection and goroutines.
type Conn interface {
	// Close is called once, when the Sub ends (by the last waiter to
	// leave, or once a lingering Sub's Linger passed or the Hub closed),
	// after Closing is closed and without the hub's mutex. It must not
	// wait for the network: the waiter that leaves last must not pay for
	// it.
	Close()
}

// Sub is one run of a hub's connection and what it subscribes: it starts
// with the first waiter and ends with the last, or, with Hub.Linger, once
// it lingered that long with nobody waiting.
type Sub struct {
	// Closing is closed when the Sub ends.
	Closing chan struct{}
	// Kick (capacity 1) is signalled when the bookkeeping changed.
	Kick chan struct{}

	conn     Conn
	channels map[string]*channel // the channels that have waiters, or that a lingering Sub keeps
	written  map[string]bool     // SUBSCRIBEd, as last written
	refused  map[string]bool     // SUBSCRIBEd, but the node may have refused it
	waiters  int
	pings    uint64 // the number of the last PING planned
	resync   bool   // a connection dropped: a PING must follow
	resyncAt uint64 // the PING whose pong ends the resynchronisation; 0 if none
	// linger ends the Sub once Hub.Linger passed after its last waiter
	// left; nil until the Sub first lingers.
	linger *time.Timer
}

type channel struct {
	active  chan struct{} // closed when confirmed or failed
	ok      bool          // confirmed: the node has the SUBSCRIBE
	err     error         // set before active is closed when it failed
	ping    uint64        // the PING whose pong confirms it; 0 until planned
	waiters map[*listener]struct{}
}

// listener is one Notify registration.
type listener struct {
	released func(payload string)
	ch       *channel
}

// Notify registers released for messages on each of names, starting a
// Sub (and its Conn, by start, called with the hub's mutex held) for the
// first waiter or joining a lingering one, and returns once every channel is confirmed, or the error
// that failed one, or ctx's. The channels not yet subscribed are planned
// together, so that one write subscribes them all and one PING confirms
// them. stop must be called; it leaves every channel at once (one plan
// unsubscribes them, or the last waiter's Close), never waits for the
// network, and once it returns released is not called again.
func (h *Hub) Notify(ctx context.Context, names []string, released func(string), start func(*Sub) Conn) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.sub == nil {
		h.sub = &Sub{Closing: make(chan struct{}), Kick: make(chan struct{}, 1),
			channels: map[string]*channel{}, written: map[string]bool{}, refused: map[string]bool{}}
		h.sub.conn = start(h.sub)
	}
	s := h.sub
	s.waiters++
	fresh := false
	mine := make([]*listener, len(names))
	for i, name := range names {
		ch := s.channels[name]
		if ch == nil {
			fresh = true
			ch = &channel{active: make(chan struct{}), waiters: map[*listener]struct{}{}}
			s.channels[name] = ch
		}
		mine[i] = &listener{released: released, ch: ch}
		ch.waiters[mine[i]] = struct{}{}
	}
	h.mu.Unlock()
	if fresh {
		s.Wake()
	}

	var once sync.Once
	stop := func() { once.Do(func() { h.leave(s, names, mine) }) }
	for _, me := range mine {
		select {
		case <-me.ch.active: // confirmed (or failed) already: ctx is not looked at
		default:
			select {
			case <-me.ch.active:
			case <-ctx.Done():
				stop()
				return nil, ctx.Err()
			}
		}
		if err := me.ch.err; err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// Wake tells the adapter's writer to look at the bookkeeping.
func (s *Sub) Wake() {
	select {
	case s.Kick <- struct{}{}:
	default: // it will look anyway
	}
}

// leave removes a waiter from its channels; a channel left without
// waiters is unsubscribed by the writer, and the last waiter of all
// closes the Sub, or leaves it lingering (Hub.Linger).
func (h *Hub) leave(s *Sub, names []string, mine []*listener) {
	h.mu.Lock()
	s.waiters--
	last := s.waiters == 0
	lingers := last && h.Linger > 0 && !h.closed
	unsubscribe := false
	for i, me := range mine {
		ch := me.ch
		delete(ch.waiters, me)
		if !last && len(ch.waiters) == 0 && s.channels[names[i]] == ch {
			delete(s.channels, names[i])
			unsubscribe = true
		}
	}
	if lingers {
		// Nobody waits: the Sub keeps the last waiter's confirmed
		// channels, if they are few, and unsubscribes every other (the
		// ones kept while an earlier waiter's lingered, among them).
		keep := len(names) <= maxLingering
		for name, ch := range s.channels {
			if !keep || !ch.ok || !slices.Contains(names, name) {
				delete(s.channels, name)
				unsubscribe = true
			}
		}
	}
	switch {
	case !last:
	case !lingers:
		h.sub = nil // the next waiter starts a new Sub
	case s.linger == nil:
		s.linger = time.AfterFunc(h.Linger, func() { h.expire(s) })
	default:
		s.linger.Reset(h.Linger)
	}
	h.mu.Unlock()
	if unsubscribe {
		s.Wake()
	}
	if last && !lingers {
		s.close()
	}
}

// expire closes s if it still lingers: nobody came for Linger (or the
// Hub closes).
func (h *Hub) expire(s *Sub) {
	h.mu.Lock()
	idle := h.sub == s && s.waiters == 0
	if idle {
		h.sub = nil
	}
	h.mu.Unlock()
	if idle {
		s.close()
	}
}

// Close closes a lingering Sub (its Conn.Close closes or parks the
// connection, as after a last waiter), and no Sub lingers from then on: a
// Sub with waiters closes when the last of them leaves.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	s := h.sub
	h.mu.Unlock()
	if s != nil {
		h.expire(s)
	}
}

// close ends the Sub: its linger timer, Closing, then its Conn's Close.
// Nobody joins it any more (h.sub is another), so nothing else touches
// the timer.
func (s *Sub) close() {
	if s.linger != nil {
		s.linger.Stop()
	}
	close(s.Closing)
	s.conn.Close()
}

// Plan is one round of writes: UNSUBSCRIBE, SUBSCRIBE, then PING number
// Ping (0: no PING).
type Plan struct {
	Subscribe, Unsubscribe []string
	Ping                   uint64
}

// Empty reports whether the round has nothing to write.
func (p Plan) Empty() bool { return p.Ping == 0 && len(p.Unsubscribe) == 0 }

// PlanLocked compares the channels that have waiters with the ones
// written, and plans the writes that bring the node in line, followed by
// a PING if a channel or a resynchronisation awaits confirmation. The
// plan is taken as written.
func (s *Sub) PlanLocked() Plan {
	var p Plan
	confirm := s.resync
	for name := range s.refused {
		delete(s.refused, name)
		if s.channels[name] == nil { // on the client's list, which it may resubscribe
			p.Unsubscribe = append(p.Unsubscribe, name)
		}
	}
	for name, ch := range s.channels {
		if !s.written[name] {
			s.written[name] = true
			p.Subscribe = append(p.Subscribe, name)
		}
		if !ch.ok && ch.ping == 0 {
			confirm = true
		}
	}
	for name := range s.written {
		if s.channels[name] == nil {
			delete(s.written, name)
			p.Unsubscribe = append(p.Unsubscribe, name)
		}
	}
	if !confirm {
		return p
	}
	s.pings++
	p.Ping = s.pings
	for _, ch := range s.channels {
		if !ch.ok && ch.ping == 0 {
			ch.ping = p.Ping
		}
	}
	if s.resync {
		s.resync, s.resyncAt = false, p.Ping
	}
	return p
}

// PongLocked handles the answer to PING seq: everything written before
// it took effect. After a resynchronisation the active channels' waiters
// are called with "", then the channels it confirms are active.
func (s *Sub) PongLocked(seq uint64) {
	if s.resyncAt != 0 && seq >= s.resyncAt {
		s.resyncAt = 0
		for _, ch := range s.channels {
			if ch.ok {
				for w := range ch.waiters {
					w.released("")
				}
			}
		}
	}
	for _, ch := range s.channels {
		if !ch.ok && ch.ping != 0 && ch.ping <= seq {
			ch.ok = true
			close(ch.active)
		}
	}
}

// FailedLocked, after the round p failed, fails the channels it was to
// confirm (their Notify calls return err; later ones start afresh) and
// asks for a resynchronisation. They stay written, to be unsubscribed.
func (s *Sub) FailedLocked(p Plan, err error) {
	if p.Ping != 0 {
		for name, ch := range s.channels {
			if !ch.ok && ch.ping == p.Ping {
				ch.err = err
				close(ch.active)
				delete(s.channels, name)
			}
		}
	}
	s.ResyncLocked()
}

// RefusedLocked, after the node answered a command with an error, fails
// every channel whose SUBSCRIBE was written and not yet confirmed, with
// wrap(channel)'s error: replies come in order, so the refused command is
// one of theirs. They count as not written, so that a new waiter's
// SUBSCRIBE is written again, and as refused, so that they are
// unsubscribed if nobody waits for them any more.
func (s *Sub) RefusedLocked(wrap func(channel string) error) {
	for name, ch := range s.channels {
		if !ch.ok && ch.ping != 0 {
			ch.err = wrap(name)
			close(ch.active)
			delete(s.channels, name)
			delete(s.written, name)
			s.refused[name] = true
		}
	}
	s.Wake()
}

// ResyncLocked records that the connection dropped and the client
// resubscribes by itself: releases may have been missed, and the pong of
// the next PING planned tells when it is over.
func (s *Sub) ResyncLocked() { s.resync, s.resyncAt = true, 0 }

// LostLocked records that the connection was replaced by a new one with
// no subscription: every channel is to be written again, the unconfirmed
// ones confirmed by a PING on the new connection, and the active ones
// told, once resubscribed, that a release may have been missed.
func (s *Sub) LostLocked() {
	clear(s.written)
	for _, ch := range s.channels {
		if !ch.ok {
			ch.ping = 0 // its PING went to the old connection
		}
	}
	s.ResyncLocked()
}

// DispatchLocked calls the waiters of channel with payload.
func (s *Sub) DispatchLocked(channel, payload string) {
	if ch := s.channels[channel]; ch != nil {
		for w := range ch.waiters {
			w.released(payload)
		}
	}
}

// DroppedLocked reports whether an unsubscription of channel that the
// node sent is one the hub did not ask for: the channel has waiters and
// is written (the hub's own UNSUBSCRIBE concerns a channel it removed from
// written when it planned it).
func (s *Sub) DroppedLocked(channel string) bool {
	return s.channels[channel] != nil && s.written[channel]
}
