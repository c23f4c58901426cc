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

// hub multiplexes one node's channels (a cluster slot's) to the waiters
// in this process over one pub/sub connection, with a writer and a
// receiver goroutine while someone waits (and subscriptionLinger after).
// The bookkeeping is internal/subhub's; this is the go-redis glue, and
// docs/backends.md the design. The zero hub is ready.
type hub struct {
	core subhub.Hub

	sharded bool                // SSUBSCRIBE and SUNSUBSCRIBE: a cluster slot's hub
	wrap    func(pubSub) pubSub // when set (by tests), stands between the hub and go-redis
}

// pubSub is what the hub uses of a *redis.PubSub.
type pubSub interface {
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	Ping(ctx context.Context, payload ...string) error
	Receive(ctx context.Context) (any, error)
	Close() error
}

// shardedPubSub subscribes with SSUBSCRIBE and SUNSUBSCRIBE. go-redis
// resubscribes every channel at once after a drop, which a cluster
// refuses unless they share a slot: hence one hub per slot.
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
	psMu   sync.Mutex            // guards ps and closed
	ps     pubSub                // replaced by reopen
	closed bool                  // ps is not replaced any more
	open   func() pubSub         // a new connection, as the first
	c      redis.UniversalClient // the node's client
	ctx    context.Context       // the goroutines', cancelled when the Sub ends
	cancel context.CancelFunc
	// dialled (sharded, guarded by the core mutex) is closed once the
	// writer's SSUBSCRIBE routed the connection's dial: receive waits.
	dialled chan struct{}
	wg      sync.WaitGroup
}

const (
	// The pauses between reconnections, and between failed writes.
	receivePause    = 50 * time.Millisecond
	maxReceivePause = time.Second
	// subscriptionLinger keeps a subscription up after its last waiter,
	// for the next one on its channels (subhub.Hub.Linger).
	subscriptionLinger = 250 * time.Millisecond
	subscribeTimeout   = time.Second    // bounds each round of writes, made for all waiters
	pingPrefix         = "redlock:hub:" // starts the payload of the hub's numbered PINGs
)

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
	s := &subscription{Sub: sub, ps: open(), open: open, c: c, ctx: rctx, cancel: cancel}
	if h.sharded {
		s.dialled = make(chan struct{})
	}
	s.wg.Add(2)
	go s.receive(&h.core, h.sharded)
	go s.write(&h.core)
	return s
}

// Close is called once the Sub ends. It closes the connection, which waits
// for a write in progress, on a goroutine: the last waiter must not wait.
func (s *subscription) Close() {
	s.cancel() // abandons a dial in progress
	go func() {
		s.psMu.Lock()
		s.closed = true
		ps := s.ps
		s.psMu.Unlock()
		_ = ps.Close()
		s.wg.Wait()
	}()
}

// write brings the node in line with the bookkeeping whenever woken, and
// retries a failed round after a pause, until the subscription closes.
func (s *subscription) write(mu sync.Locker) {
	defer s.wg.Done()
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
		mu.Lock()
		if s.dialled != nil {
			close(s.dialled) // go-redis now knows a channel to route by
			s.dialled = nil
		}
		mu.Unlock()
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

// flush writes one round, every write even after one failed, so that
// what go-redis resubscribes after a reconnect is what was planned.
func (s *subscription) flush(p subhub.Plan) (first error) {
	ctx, cancel := context.WithTimeout(s.ctx, subscribeTimeout)
	defer cancel()
	ps := s.pubSub()
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	defer func() { // go-redis reading a garbage greeting on a new connection
		if p := recover(); p != nil {
			keep(&clientPanic{value: p})
		}
	}()
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

// receive dispatches the node's messages until the subscription closes.
// mu is the hub's mutex.
func (s *subscription) receive(mu sync.Locker, sharded bool) {
	defer s.wg.Done()
	pause := receivePause
	for {
		if sharded && !s.waitDialled(mu) {
			return
		}
		msg, err := s.receiveOne()
		if err != nil {
			select {
			case <-s.Closing:
				return
			default:
			}
			moved := false
			if rerr, ok := errors.AsType[redis.Error](err); ok {
				// A refused SUBSCRIBE (an ACL, MOVED): the PING after it
				// must not confirm it.
				mu.Lock()
				s.RefusedLocked(func(name string) error {
					return fmt.Errorf("goredis: subscribing to %s: %w", name, err)
				})
				mu.Unlock()
				moved = sharded && strings.HasPrefix(rerr.Error(), "MOVED ")
			}
			// go-redis reconnects and resubscribes; the next PING tells
			// when: what was published meanwhile is lost.
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
			if _, broken := errors.AsType[*clientPanic](err); moved || broken {
				// The slot has another master now, or the connection's
				// stream cannot be read any more.
				s.reopen(mu)
			}
			continue
		}
		pause = receivePause
		mu.Lock()
		dropped := false
		switch m := msg.(type) {
		case *redis.Subscription: // unasked: the node no longer owns the slot
			dropped = sharded && m.Kind == "sunsubscribe" && s.DroppedLocked(m.Channel)
		case *redis.Message:
			s.DispatchLocked(m.Channel, m.Payload)
		case *redis.Pong:
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

// receiveOne receives the next message, turning a panic of go-redis
// reading it (a node answering garbage: a message that is not one) into
// an error, after which receive reopens the connection.
func (s *subscription) receiveOne() (msg any, err error) {
	ps := s.pubSub()
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, &clientPanic{value: p}
		}
	}()
	return ps.Receive(s.ctx)
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

// reopen has the slot map reloaded and every channel subscribed anew on a
// new connection, for a sharded hub whose slot moved to another master.
// Called by the receiver, without the hub's mutex.
func (s *subscription) reopen(mu sync.Locker) {
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
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
