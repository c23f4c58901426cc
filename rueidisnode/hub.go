package rueidisnode

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/internal/subhub"
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
// The bookkeeping (which channels have waiters, which are subscribed,
// which await confirmation, dispatch) is package internal/subhub's, shared
// with the go-redis adapter; this file is the rueidis glue.
//
// Activation is exact. The goroutine writes a round (UNSUBSCRIBE of the
// channels nobody waits for any more, SUBSCRIBE of the new ones, then a
// PING) as one pipeline and waits for every reply before it plans
// the next; the node answers commands on a connection in order, so the
// PING's reply proves that every SUBSCRIBE written before it has taken
// effect, and only then are the channel's waiters told that they are
// subscribed. (rueidis also matches each SUBSCRIBE to its own reply, in
// order, which is the proof over RESP2; see flush.)
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

	core    subhub.Hub
	running *subscription // the last subscription started (for tests); guarded by core's mutex

	// dedicate, when set (by tests), replaces c.Dedicate.
	dedicate func() rueidis.DedicatedClient
}

// subscription is one run of the hub's goroutine: the glue of a
// subhub.Sub, whose bookkeeping is guarded by the hub's core mutex.
type subscription struct {
	*subhub.Sub
	h      *hub
	ctx    context.Context // cancelled with the last waiter: abandons a write
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has ended

	resp2 bool // the node speaks RESP2: no PING in a round (the goroutine's own)
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

// notify subscribes released to channels, all in one round of writes
// (subhub.Hub.Notify).
func (h *hub) notify(ctx context.Context, released func(string), channels ...string) (func(), error) {
	return h.core.Notify(ctx, channels, released, h.start)
}

// start starts the goroutine of a new subhub.Sub; called with the core's
// mutex held.
func (h *hub) start(sub *subhub.Sub) subhub.Conn {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{Sub: sub, h: h, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	h.running = s
	go s.run()
	return s
}

// Close is called by the last waiter to leave: it abandons a write in
// flight; the goroutine sees Closing and closes the connection.
func (s *subscription) Close() { s.cancel() }

// run is the hub's goroutine: it opens a connection, serves it until the
// last waiter leaves or the connection fails, and then closes it; after a
// failure it opens a new one after a pause.
func (s *subscription) run() {
	defer close(s.done)
	pause := retryPause
	for {
		select {
		case <-s.Closing:
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
		confirmed := s.serve(dc, conn{lost: lost, moved: moved})
		dc.Close() // closes the connection; rueidis drops it from its pool
		if confirmed {
			pause = retryPause
		}
		select {
		case <-s.Closing:
			return
		default:
		}
		s.h.core.Lock()
		s.LostLocked() // the next connection starts with no subscription
		s.h.core.Unlock()
		t := time.NewTimer(pause)
		select {
		case <-s.Closing:
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
// last waiter leaves or the connection fails. confirmed tells whether a
// round succeeded.
func (s *subscription) serve(dc rueidis.DedicatedClient, cn conn) (confirmed bool) {
	bound := false // a sharded connection: a round with SSUBSCRIBE was sent
	for {
		s.h.core.Lock()
		p := s.PlanLocked()
		s.h.core.Unlock()
		if !p.Empty() {
			var err error
			if s.h.sharded && !bound && len(p.Subscribe) == 0 {
				// Nothing to subscribe, so no waiter to confirm: a PING
				// alone would bind the connection to a random node.
			} else {
				bound = true
				err = s.flush(dc, p)
			}
			s.h.core.Lock()
			if err != nil {
				s.FailedLocked(p, err)
			} else {
				s.PongLocked(p.Ping)
			}
			s.h.core.Unlock()
			if err != nil {
				return confirmed
			}
			confirmed = true
		}
		select {
		case <-s.Closing:
			return confirmed
		case <-cn.lost: // rueidis closed the connection
			return confirmed
		case <-cn.moved: // the node dropped the slot's subscriptions
			return confirmed
		case <-s.Kick:
		}
	}
}

// flush writes one round as one pipeline and waits for every reply.
//
// Over RESP2 (Redis before 6, or ClientOption.AlwaysRESP2) rueidis sends
// pub/sub commands on a connection of their own and refuses, before
// sending anything, a pipeline that mixes them with a PING. The round is
// then sent without it: rueidis matches each SUBSCRIBE to its own reply,
// in order, and that reply proves it. The PING is only a second proof
// over RESP3.
func (s *subscription) flush(dc rueidis.DedicatedClient, p subhub.Plan) error {
	ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
	defer cancel()
	round := make(rueidis.Commands, 0, 3)
	if len(p.Unsubscribe) > 0 {
		if s.h.sharded {
			round = append(round, dc.B().Sunsubscribe().Channel(p.Unsubscribe...).Build())
		} else {
			round = append(round, dc.B().Unsubscribe().Channel(p.Unsubscribe...).Build())
		}
	}
	if len(p.Subscribe) > 0 {
		if s.h.sharded {
			round = append(round, dc.B().Ssubscribe().Channel(p.Subscribe...).Build())
		} else {
			round = append(round, dc.B().Subscribe().Channel(p.Subscribe...).Build())
		}
	}
	pubsub := len(round)
	if p.Ping != 0 && !s.resp2 {
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

// unsubscribed is the OnSubscription hook of a sharded connection, called
// by rueidis's reading goroutine: a sunsubscribe of a channel that has
// waiters and that the hub has not unsubscribed is the node dropping the
// slot's subscriptions, and signals moved.
func (s *subscription) unsubscribed(m rueidis.PubSubSubscription, moved chan<- struct{}) {
	if m.Kind != "sunsubscribe" {
		return
	}
	s.h.core.Lock()
	dropped := s.DroppedLocked(m.Channel)
	s.h.core.Unlock()
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
	s.h.core.Lock()
	defer s.h.core.Unlock()
	s.DispatchLocked(m.Channel, m.Message)
}
