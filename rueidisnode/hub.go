package rueidisnode

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// hub multiplexes one node's release channels to the waiters in this
// process over a single dedicated connection (rueidis's Dedicate: a
// connection of the client's blocking pool that no other call shares).
// The connection and the hub's one goroutine, which opens it, writes
// SUBSCRIBE, UNSUBSCRIBE and PING on it and reopens it when it drops,
// exist only while at least one waiter is subscribed: the last stop tells
// the goroutine to close the connection and end, so an idle backend holds
// no goroutine and no connection, and needs no Close. Messages are
// delivered by rueidis's own reading goroutine of that connection
// (PubSubHooks.OnMessage), which calls the waiters.
//
// Activation is exact. The goroutine writes a round (UNSUBSCRIBE of the
// channels nobody waits for any more, SUBSCRIBE of the new ones, then a
// PING) as one pipeline and waits for every reply before it plans the
// next; the node answers commands on a connection in order, so the PING's
// reply proves that every SUBSCRIBE written before it has taken effect,
// and only then are the channel's waiters told that they are subscribed.
// (rueidis also matches each SUBSCRIBE to its own reply, in order, which
// is the proof over RESP2; see flush.)
//
// When the connection drops (rueidis closes the hooks' channel with the
// error) or a round fails (an error, or no reply within subscribeTimeout,
// after which the connection is closed: its state is unknown), the
// goroutine opens a new connection after a pause and subscribes every
// channel again. Releases published in between were missed: once the new
// connection's PING is answered, every waiter of a channel that was
// already active is called with payload "". Channels that a failed round
// was to confirm fail instead: their Notify calls return the error (the
// waiter then sleeps out its backoff, as without hand-off), and later
// calls start afresh.
//
// Dispatch never waits for a write. The hub's mutex guards the bookkeeping
// and is held while dispatching; the goroutine writes without it. After
// stop returns, its callback is out of the bookkeeping, so it is not
// called again.
//
// A Redis Cluster node has one hub per hash slot, in sharded mode
// (cluster.go): SSUBSCRIBE and SUNSUBSCRIBE on a dedicated connection to
// the slot's master, which rueidis picks by the slot of the connection's
// first command, so a round on a new connection that would not start
// with an SSUBSCRIBE (only a PING, when every waiter left) is not sent.
// When the slot moves to another master (a migration, a failover), its
// old master drops the slot's subscriptions (a sunsubscribe the hub did
// not ask for, seen by the OnSubscription hook) or answers MOVED (a failed
// round, after which rueidis refreshes its slot map): the hub then closes
// the connection and, as after a drop, opens one to the slot's master,
// subscribes every channel there anew, and wakes the waiters with "".
//
// The goroutine outlives the last stop while it finishes what it was
// doing: a write, bounded by subscribeTimeout and abandoned at once, or
// opening a connection, which rueidis bounds by the client's
// Dialer.Timeout (5 s by default) and does not let a caller cancel; then
// closing the connection, which rueidis bounds by a second on a node that
// does not answer.
type hub struct {
	c rueidis.Client

	// sharded makes the hub subscribe with SSUBSCRIBE and SUNSUBSCRIBE
	// (a Redis Cluster node's hub, one per hash slot, see cluster.go).
	sharded bool

	mu  sync.Mutex
	sub *subscription // nil while nobody waits

	// dedicate, when set (by tests), replaces c.Dedicate.
	dedicate func() rueidis.DedicatedClient
}

// subscription is one run of the hub's goroutine and what it subscribes.
// Its maps and flags are guarded by the hub's mutex.
type subscription struct {
	h       *hub
	ctx     context.Context // cancelled with the last waiter: abandons a write
	cancel  context.CancelFunc
	closing chan struct{} // closed when the last waiter left
	kick    chan struct{} // capacity 1: the bookkeeping changed
	done    chan struct{} // closed when the goroutine has ended

	channels map[string]*channelWaiters // the channels that have waiters
	written  map[string]bool            // SUBSCRIBEd on the current connection
	waiters  int
	resync   bool // a connection dropped: tell the active channels once resubscribed

	resp2 bool // the node speaks RESP2: no PING in a round (the goroutine's own)
}

type channelWaiters struct {
	name    string
	active  chan struct{} // closed when confirmed or failed
	ok      bool          // confirmed: the node has the SUBSCRIBE
	err     error         // set before active is closed when the round failed
	waiters map[*listener]struct{}
}

// listener is one Notify registration.
type listener struct {
	released func(payload string)
	cw       *channelWaiters
}

// retryPause and maxRetryPause bound the pauses before reopening a
// connection that dropped or failed.
const (
	retryPause    = 50 * time.Millisecond
	maxRetryPause = time.Second
)

// subscribeTimeout bounds each round of writes, which are made for all
// waiters and so without a caller's context.
const subscribeTimeout = time.Second

// errConnectionLost is the error of a connection that rueidis closed
// without telling why.
var errConnectionLost = errors.New("rueidisnode: pub/sub connection lost")

// errSlotMoved is the error of a sharded connection whose node dropped
// the subscriptions of the hub's slot: the slot moved.
var errSlotMoved = errors.New("rueidisnode: the node dropped the slot's subscriptions (the slot moved)")

func (h *hub) notify(ctx context.Context, key string, released func(string)) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := redlock.ReleaseChannel(key)
	h.mu.Lock()
	if h.sub == nil {
		h.sub = h.open()
	}
	s := h.sub
	s.waiters++
	cw := s.channels[name]
	fresh := cw == nil
	if fresh {
		cw = &channelWaiters{name: name, active: make(chan struct{}), waiters: map[*listener]struct{}{}}
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

// open starts a subscription and its goroutine; called with h.mu held.
func (h *hub) open() *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{h: h, ctx: ctx, cancel: cancel, closing: make(chan struct{}),
		kick: make(chan struct{}, 1), done: make(chan struct{}),
		channels: map[string]*channelWaiters{}, written: map[string]bool{}}
	go s.run()
	return s
}

// wake tells the goroutine to look at the bookkeeping.
func (s *subscription) wake() {
	select {
	case s.kick <- struct{}{}:
	default: // it will look anyway
	}
}

// leave removes a waiter; the last one of a channel has the goroutine
// unsubscribe it, the last one of all has the connection closed. It never
// waits for the network.
func (h *hub) leave(s *subscription, name string, me *listener) {
	h.mu.Lock()
	cw := me.cw
	delete(cw.waiters, me)
	s.waiters--
	last := s.waiters == 0
	unsubscribe := false
	if last {
		h.sub = nil // the next waiter starts a new subscription
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
		s.cancel() // abandons a write in flight
	}
}

// run is the hub's goroutine: it opens a connection, serves it until the
// last waiter leaves or the connection fails, and then closes it; after a
// failure it opens a new one after a pause.
func (s *subscription) run() {
	defer close(s.done)
	pause := retryPause
	for {
		select {
		case <-s.closing:
			return
		default:
		}
		dc := s.dedicate()
		moved := make(chan struct{}, 1)
		hooks := rueidis.PubSubHooks{OnMessage: s.dispatch}
		if s.h.sharded {
			hooks.OnSubscription = func(m rueidis.PubSubSubscription) { s.unsubscribed(m, moved) }
		}
		lost := dc.SetPubSubHooks(hooks)
		confirmed, err := s.serve(dc, conn{lost: lost, moved: moved})
		dc.Close() // closes the connection; rueidis drops it from its pool
		if confirmed {
			pause = retryPause
		}
		select {
		case <-s.closing:
			return
		default:
		}
		s.h.mu.Lock()
		s.lostLocked(err)
		s.h.mu.Unlock()
		t := time.NewTimer(pause)
		select {
		case <-s.closing:
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, maxRetryPause)
	}
}

// dedicate takes a connection of its own from the client's blocking pool,
// dialling it (rueidis bounds the dial by the client's Dialer.Timeout). A
// connection that could not be made answers every call with the error.
func (s *subscription) dedicate() rueidis.DedicatedClient {
	if s.h.dedicate != nil {
		return s.h.dedicate()
	}
	dc, _ := s.h.c.Dedicate() // its release is part of dc.Close
	return dc
}

// conn is what serve watches of a connection: rueidis's hooks channel,
// which delivers the error that closed it, and moved, signalled when a
// sharded connection's node dropped the slot's subscriptions.
type conn struct {
	lost  <-chan error
	moved <-chan struct{}
}

// serve writes rounds on dc whenever the bookkeeping changes, until the
// last waiter leaves (nil error) or the connection fails. confirmed tells
// whether a round succeeded.
func (s *subscription) serve(dc rueidis.DedicatedClient, cn conn) (confirmed bool, err error) {
	bound := false // a sharded connection: a round with SSUBSCRIBE was sent
	for {
		s.h.mu.Lock()
		p := s.planLocked()
		s.h.mu.Unlock()
		if !p.empty() {
			var err error
			if s.h.sharded && !bound && len(p.subscribe) == 0 {
				// Nothing to subscribe, so no waiter to confirm: a PING
				// alone would bind the connection to a random node.
			} else {
				bound = true
				err = s.flush(dc, p)
			}
			s.h.mu.Lock()
			if err != nil {
				s.failedLocked(p, err)
			} else {
				s.confirmedLocked(p)
			}
			s.h.mu.Unlock()
			if err != nil {
				return confirmed, err
			}
			confirmed = true
		}
		select {
		case <-s.closing:
			return confirmed, nil
		case err, open := <-cn.lost:
			if !open || err == nil {
				err = errConnectionLost
			}
			return confirmed, err
		case <-cn.moved:
			return confirmed, errSlotMoved
		case <-s.kick:
		}
	}
}

// plan is one round of writes: the PING follows when a channel or a
// resynchronisation awaits confirmation.
type plan struct {
	subscribe, unsubscribe []string
	await                  []*channelWaiters // confirmed by this round's PING
	resync                 bool
}

func (p *plan) ping() bool  { return len(p.await) > 0 || p.resync }
func (p *plan) empty() bool { return !p.ping() && len(p.unsubscribe) == 0 }

// planLocked, called with the hub's mutex held, compares the channels that
// have waiters with the ones written on the connection and plans the
// writes that bring the node in line.
func (s *subscription) planLocked() plan {
	p := plan{resync: s.resync}
	for name, cw := range s.channels {
		if !s.written[name] {
			s.written[name] = true
			p.subscribe = append(p.subscribe, name)
		}
		if !cw.ok {
			p.await = append(p.await, cw)
		}
	}
	for name := range s.written {
		if s.channels[name] == nil {
			delete(s.written, name)
			p.unsubscribe = append(p.unsubscribe, name)
		}
	}
	return p
}

// flush writes one round as one pipeline and waits for every reply.
//
// Over RESP2 (Redis before 6, or ClientOption.AlwaysRESP2) rueidis sends
// pub/sub commands on a connection of their own and refuses, before
// sending anything, a pipeline that mixes them with a PING. The round is
// then sent without it: rueidis matches each SUBSCRIBE to its own reply,
// in order, and that reply proves it. The PING is only a second proof
// over RESP3.
func (s *subscription) flush(dc rueidis.DedicatedClient, p plan) error {
	ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
	defer cancel()
	round := make(rueidis.Commands, 0, 3)
	if len(p.unsubscribe) > 0 {
		if s.h.sharded {
			round = append(round, dc.B().Sunsubscribe().Channel(p.unsubscribe...).Build())
		} else {
			round = append(round, dc.B().Unsubscribe().Channel(p.unsubscribe...).Build())
		}
	}
	if len(p.subscribe) > 0 {
		if s.h.sharded {
			round = append(round, dc.B().Ssubscribe().Channel(p.subscribe...).Build())
		} else {
			round = append(round, dc.B().Subscribe().Channel(p.subscribe...).Build())
		}
	}
	pubsub := len(round)
	if p.ping() && !s.resp2 {
		round = append(round, dc.B().Ping().Build())
	}
	err := do(ctx, dc, round)
	if errors.Is(err, rueidis.ErrRESP2PubSubMixed) {
		s.resp2 = true
		err = do(ctx, dc, round[:pubsub])
	}
	return err
}

// do sends round as one pipeline and returns the first error.
func do(ctx context.Context, dc rueidis.DedicatedClient, round rueidis.Commands) error {
	if len(round) == 0 {
		return nil
	}
	for _, r := range dc.DoMulti(ctx, round...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// confirmedLocked, called with the hub's mutex held after round p
// succeeded: after a resynchronisation the channels that were active are
// told that a release may have been missed, then the channels p awaited
// are active.
func (s *subscription) confirmedLocked(p plan) {
	if p.resync {
		s.resync = false
		for _, cw := range s.channels {
			if cw.ok {
				for w := range cw.waiters {
					w.released("")
				}
			}
		}
	}
	for _, cw := range p.await {
		if !cw.ok && cw.err == nil {
			cw.ok = true
			close(cw.active)
		}
	}
}

// failedLocked, called with the hub's mutex held after round p failed,
// fails the channels it was to confirm: their Notify calls return err.
func (s *subscription) failedLocked(p plan, err error) {
	for _, cw := range p.await {
		if cw.ok || cw.err != nil {
			continue
		}
		cw.err = err
		close(cw.active)
		if s.channels[cw.name] == cw {
			delete(s.channels, cw.name)
		}
	}
}

// lostLocked, called with the hub's mutex held once the connection is
// closed: the next one starts with no subscription, and the channels that
// were active must hear that a release may have been missed.
func (s *subscription) lostLocked(error) {
	clear(s.written)
	for _, cw := range s.channels {
		if cw.ok {
			s.resync = true
		}
	}
}

// unsubscribed is the OnSubscription hook of a sharded connection, called
// by rueidis's reading goroutine: a sunsubscribe of a channel that has
// waiters and that the hub has not unsubscribed is the node dropping the
// slot's subscriptions, and signals moved. (The hub's own SUNSUBSCRIBE
// concerns a channel it removed from written when it planned it.)
func (s *subscription) unsubscribed(m rueidis.PubSubSubscription, moved chan<- struct{}) {
	if m.Kind != "sunsubscribe" {
		return
	}
	s.h.mu.Lock()
	dropped := s.channels[m.Channel] != nil && s.written[m.Channel]
	s.h.mu.Unlock()
	if dropped {
		select {
		case moved <- struct{}{}:
		default: // already signalled
		}
	}
}

// dispatch is the OnMessage hook, called by rueidis's reading goroutine of
// the connection.
func (s *subscription) dispatch(m rueidis.PubSubMessage) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if cw := s.channels[m.Channel]; cw != nil {
		for w := range cw.waiters {
			w.released(m.Message)
		}
	}
}
