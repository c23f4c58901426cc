// Package faultproxy is the network nemesis's forwarder: it stands between
// clients and one server on 127.0.0.1 and delivers only what a real network
// can deliver, but at the worst moment. Its fault is switched at run time
// (Set) and applies to every connection, open and new.
//
// Faults, as a client of Addr and the server see them:
//
//   - Pass: bytes are forwarded as they come.
//   - Late(d): every chunk a client sends is held and written to the
//     server d after it was read, in order per connection, even when the
//     client has closed its connection meanwhile: the proxy keeps its
//     server connection open until every held byte is written, then
//     half-closes it (as TCP delivers data in flight before the FIN), so
//     the server runs commands whose client gave up. A chunk keeps the
//     delivery time it was given when read, like a packet already on its
//     way: switching the fault later neither hurries nor slows it, and a
//     new connection's bytes may overtake an older connection's.
//     Replies are not delayed.
//   - LoseReply: commands reach the server and run; the first chunk of a
//     reply read from the server while the fault is on is dropped and the
//     connection cut on both sides. The client sees EOF after its command
//     ran (go-redis with MaxRetries >= 0 resends it on another connection).
//   - Stall: nothing is forwarded in either direction until the fault is
//     switched off; then everything queued is delivered, in order per
//     connection and direction, including what clients sent before they
//     closed (as after a partition heals). New connections are accepted.
//
// Every goroutine the proxy starts ends by Close.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DialTimeout bounds connecting to the target for each client connection.
const DialTimeout = 5 * time.Second

// drainTimeout bounds how long a connection whose client left waits, once
// every held byte is written and its sending side half-closed, for the
// server to close its side. Redis closes at once after reading EOF.
const drainTimeout = 5 * time.Second

// Kind names a fault.
type Kind int

const (
	Pass Kind = iota
	Late
	LoseReply
	Stall
)

func (k Kind) String() string {
	switch k {
	case Pass:
		return "pass"
	case Late:
		return "late"
	case LoseReply:
		return "lose-reply"
	case Stall:
		return "stall"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is what the proxy does to the traffic; see the package comment.
// Delay is used by Late only.
type Fault struct {
	Kind  Kind
	Delay time.Duration
}

func (f Fault) String() string {
	if f.Kind == Late {
		return fmt.Sprintf("late(%v)", f.Delay)
	}
	return f.Kind.String()
}

// Stats counts what the proxy did since New.
type Stats struct {
	Conns       int64 // client connections accepted
	LateChunks  int64 // chunks from clients given a delay by Late
	AfterClose  int64 // chunks written to the server after their client had closed
	LostReplies int64 // replies dropped by LoseReply (each cut its connection)
}

// Proxy forwards connections accepted on its own 127.0.0.1 port to a
// target. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // cancelled by Close, to abort dials
	cancel context.CancelFunc

	mu     sync.Mutex
	fault  Fault
	flow   chan struct{} // closed unless stalled
	pipes  map[*pipe]struct{}
	closed bool
	wg     sync.WaitGroup

	conns, late, afterClose, lost atomic.Int64
	pending                       atomic.Int64 // chunks read from clients, not yet written or dropped
}

// New starts a proxy to target ("host:port") in Pass, listening on
// 127.0.0.1 on a free port; see Addr.
func New(target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("faultproxy: empty target")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	flow := make(chan struct{})
	close(flow)
	p := &Proxy{ln: ln, target: target, flow: flow, pipes: map[*pipe]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.serve)
	return p, nil
}

// Addr returns the "127.0.0.1:port" clients connect to. It never changes.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Set switches the fault, for open and new connections; a negative Delay
// counts as zero. Leaving Stall delivers what was queued.
func (p *Proxy) Set(f Fault) {
	f.Delay = max(f.Delay, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	select {
	case <-p.flow: // flowing
		if f.Kind == Stall {
			p.flow = make(chan struct{})
		}
	default: // stalled
		if f.Kind != Stall {
			close(p.flow)
		}
	}
}

// Fault returns the fault in force.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), LateChunks: p.late.Load(), AfterClose: p.afterClose.Load(), LostReplies: p.lost.Load()}
}

// Pending returns how many chunks read from clients are not yet written to
// the server (held by Late or Stall, or on their way).
func (p *Proxy) Pending() int64 { return p.pending.Load() }

// gate returns a channel that is closed while traffic may flow.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flow
}

// Close stops accepting, cuts every connection (held bytes are dropped)
// and waits until all the proxy's goroutines have ended. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cancel()
	pipes := p.pipes
	p.pipes = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range pipes {
		c.abort()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.conns.Add(1)
		p.wg.Go(func() { p.handle(client) })
	}
}

// handle dials the target for one client connection and forwards until
// both sides are done.
func (p *Proxy) handle(client net.Conn) {
	d := net.Dialer{Timeout: DialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		reset(client) // nothing listens: fail fast, like a refused connection
		return
	}
	c := newPipe(p, client, server)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.abort()
		return
	}
	p.pipes[c] = struct{}{}
	p.mu.Unlock()
	c.run()
	p.mu.Lock()
	delete(p.pipes, c)
	p.mu.Unlock()
}

// reset closes c with an RST, so the client fails at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
