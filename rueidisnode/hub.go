package rueidisnode

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/internal/subhub"
	"github.com/redis/rueidis"
)

// hub multiplexes one node's channels to the waiters in this process over
// a single dedicated connection (rueidis's Dedicate), which exists, with
// the hub's one goroutine, only while someone waits. The goroutine opens
// the connection, writes SUBSCRIBE, UNSUBSCRIBE and PING on it, and
// reopens it when it drops; rueidis's reading goroutine delivers the
// messages (PubSubHooks.OnMessage). The bookkeeping is package
// internal/subhub's, shared with the go-redis adapter.
//
// Activation is exact: a round (UNSUBSCRIBE, SUBSCRIBE, PING) goes out as
// one pipeline, and the node answers in order, so the PING's reply proves
// that the SUBSCRIBEs before it took effect; only then are their waiters
// told that they are subscribed. After a drop, or a round that failed or
// timed out (subscribeTimeout; the connection is then closed), the
// goroutine opens a new connection after a pause and subscribes every
// channel again; once that is confirmed, every waiter of a channel that
// was active is called with "", since messages may have been missed. The
// channels a failed round was to confirm fail their Subscribe calls
// instead. Dispatch holds the hub's mutex and never waits for a write.
//
// A Redis Cluster node has one hub per hash slot (SSUBSCRIBE,
// SUNSUBSCRIBE): rueidis opens its connection to the master of the slot
// of its first command, so a new connection's first round starts with an
// SSUBSCRIBE. When the slot moves, the old master drops the
// subscriptions (a sunsubscribe the hub did not ask for) or answers MOVED
// (after which rueidis refreshes its slot map), and the hub reconnects as
// after a drop.
//
// The goroutine outlives the last stop while it finishes a write
// (abandoned at once) or a dial (bounded by the client's Dialer.Timeout),
// then closes the connection (bounded by a second).
type hub struct {
	c rueidis.Client

	// sharded makes the hub subscribe with SSUBSCRIBE and SUNSUBSCRIBE
	// (a Redis Cluster node's hub, one per hash slot).
	sharded bool

	core    subhub.Hub
	running *subscription // the last subscription started (for tests); guarded by core's mutex
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
		dc, _ := s.h.c.Dedicate() // dialled by rueidis within Dialer.Timeout; released by dc.Close
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

// do sends round as one pipeline and returns the first error; a panic of
// rueidis reading the replies on this goroutine (a node answering
// garbage), which no caller could recover, is the error.
func do(ctx context.Context, dc rueidis.DedicatedClient, round rueidis.Commands) (err error) {
	if len(round) == 0 {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = &clientPanic{value: p}
		}
	}()
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
