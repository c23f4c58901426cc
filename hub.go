package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// hub multiplexes one node's release channels to the waiters in this
// process over a single pub/sub connection. The connection and its
// receiving goroutine exist only while at least one waiter is subscribed:
// the last stop closes them and waits for the goroutine, so an idle
// backend holds no goroutine and needs no Close. The zero hub is ready.
type hub struct {
	mu  sync.Mutex
	sub *subscription // nil while nobody waits
}

// subscription is one pub/sub connection and what it is subscribed to.
type subscription struct {
	ps       *redis.PubSub
	ctx      context.Context // the receive loop's, cancelled with the last waiter
	cancel   context.CancelFunc
	closing  chan struct{} // closed when the last waiter left
	done     chan struct{} // closed when the receive loop has returned
	channels map[string]*channelWaiters
	waiters  int
}

type channelWaiters struct {
	active  chan struct{} // closed when the node confirmed the SUBSCRIBE
	waiters map[*listener]struct{}
}

// listener is one Notify registration.
type listener struct{ released func(payload string) }

// receivePause and maxReceivePause bound the pauses between reconnection
// attempts of a subscription whose node went away.
const (
	receivePause    = 50 * time.Millisecond
	maxReceivePause = time.Second
)

// subscribeTimeout bounds SUBSCRIBE and UNSUBSCRIBE writes issued without
// a caller's context.
const subscribeTimeout = time.Second

func (h *hub) notify(ctx context.Context, c redis.UniversalClient, key string, released func(string)) (func(), error) {
	name := ReleaseChannel(key)
	me := &listener{released}
	h.mu.Lock()
	if h.sub == nil {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		h.sub = &subscription{ps: c.Subscribe(rctx), ctx: rctx, cancel: cancel, closing: make(chan struct{}),
			done: make(chan struct{}), channels: map[string]*channelWaiters{}}
		go h.sub.receive(&h.mu)
	}
	s := h.sub
	s.waiters++
	cw := s.channels[name]
	var err error
	if cw == nil {
		cw = &channelWaiters{active: make(chan struct{}), waiters: map[*listener]struct{}{}}
		s.channels[name] = cw
		// Under h.mu, so SUBSCRIBE and UNSUBSCRIBE of one channel reach
		// the node in the order of our bookkeeping.
		err = s.ps.Subscribe(ctx, name)
	}
	cw.waiters[me] = struct{}{}
	h.mu.Unlock()

	var once sync.Once
	stop := func() { once.Do(func() { h.leave(s, name, me) }) }
	if err == nil {
		select {
		case <-cw.active:
			return stop, nil
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	stop()
	return nil, err
}

// leave removes a waiter; the last one of a channel unsubscribes it, the
// last one of all closes the connection and waits for the receive loop.
func (h *hub) leave(s *subscription, name string, me *listener) {
	h.mu.Lock()
	cw := s.channels[name]
	delete(cw.waiters, me)
	s.waiters--
	last := s.waiters == 0
	if last {
		h.sub = nil // the next waiter starts a new connection
	} else if len(cw.waiters) == 0 {
		delete(s.channels, name)
		ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
		_ = s.ps.Unsubscribe(ctx, name) // at worst we keep receiving a channel nobody reads
		cancel()
	}
	h.mu.Unlock()
	if last {
		close(s.closing)
		s.cancel() // abandons a dial in progress in the receive loop
		_ = s.ps.Close()
		<-s.done
	}
}

// receive dispatches the node's messages to the waiters until the
// subscription closes. mu is the hub's mutex, which guards s.channels.
func (s *subscription) receive(mu *sync.Mutex) {
	defer close(s.done)
	pause := receivePause
	for {
		msg, err := s.ps.Receive(s.ctx)
		if err != nil {
			// go-redis reconnects and resubscribes on the next Receive;
			// meanwhile waiters fall back to their backoff delays.
			t := time.NewTimer(pause)
			select {
			case <-s.closing:
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, maxReceivePause)
			continue
		}
		pause = receivePause
		mu.Lock()
		switch m := msg.(type) {
		case *redis.Subscription:
			if cw := s.channels[m.Channel]; m.Kind == "subscribe" && cw != nil {
				select {
				case <-cw.active:
				default:
					close(cw.active)
				}
			}
		case *redis.Message:
			if cw := s.channels[m.Channel]; cw != nil {
				for w := range cw.waiters {
					w.released(m.Payload)
				}
			}
		}
		mu.Unlock()
	}
}

func (g *goRedis) Notify(ctx context.Context, key string, released func(string)) (func(), error) {
	return g.hub.notify(ctx, g.c, key, released)
}
