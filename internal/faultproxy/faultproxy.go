// Package faultproxy is the tests' TCP forwarder for network faults: it
// stands between clients and one server on 127.0.0.1 and delivers only what
// a real network can deliver, but at the worst moment, without root, kernel
// modules or Docker. (tc netem needs the sch_netem module, which the test
// machines' kernels lack: "Specified qdisc kind is unknown".) Its fault is
// switched at run time (Set) and applies to every connection, open and new.
//
// Faults, as a client of Addr and the server see them:
//
//   - Pass: bytes are forwarded as they come.
//   - Late(Delay, ReplyDelay): every chunk a client sends is held and
//     written to the server Delay after it was read, and every chunk the
//     server sends is written to the client ReplyDelay after it was read,
//     in order per connection and direction; each round trip grows by
//     Delay+ReplyDelay, and throughput is not limited. Client bytes are
//     delivered even when the client has closed its connection meanwhile:
//     the proxy keeps its server connection open until every held byte is
//     written, then half-closes it (as TCP delivers data in flight before
//     the FIN), so the server runs commands whose client gave up. A chunk
//     keeps the delivery time it was given when read, like a packet
//     already on its way: switching the fault later neither hurries nor
//     slows it, and a new connection's bytes may overtake an older
//     connection's.
//   - LoseReply: commands reach the server and run; the first chunk of a
//     reply read from the server while the fault is on is dropped and the
//     connection cut on both sides. The client sees EOF after its command
//     ran (go-redis with MaxRetries >= 0 resends it on another connection).
//   - Stall: packets vanish, as in a partition. Nothing is forwarded in
//     either direction until the fault is switched off; then everything
//     queued is delivered, in order per connection and direction,
//     including what clients sent before they closed (as TCP
//     retransmission delivers it after a partition heals, so commands sent
//     during the stall may still run). New connections are accepted.
//   - Cut: the server drops off the network. Open connections are closed
//     (the client sees EOF) and whatever they held is dropped; new ones
//     are reset at once, until the fault is switched off. The server
//     itself keeps running with its data.
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
	Cut
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
	case Cut:
		return "cut"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Fault is what the proxy does to the traffic; see the package comment.
// The delays are used by Late only.
type Fault struct {
	Kind       Kind
	Delay      time.Duration // client to server
	ReplyDelay time.Duration // server to client
}

func (f Fault) String() string {
	if f.Kind != Late {
		return f.Kind.String()
	}
	if f.ReplyDelay == 0 {
		return fmt.Sprintf("late(%v)", f.Delay)
	}
	return fmt.Sprintf("late(%v, replies %v)", f.Delay, f.ReplyDelay)
}

// Stats counts what the proxy did since New.
type Stats struct {
	Conns       int64 // client connections accepted
	LateChunks  int64 // chunks from clients given a delay by Late
	LateReplies int64 // chunks from servers given a delay by Late
	AfterClose  int64 // chunks written to the server after their client had closed
	LostReplies int64 // replies dropped by LoseReply (each cut its connection)
}

// Proxy forwards connections accepted on its own 127.0.0.1 port to a
// target. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target func() string
	ctx    context.Context // cancelled by Close, to abort dials
	cancel context.CancelFunc

	mu     sync.Mutex
	fault  Fault
	flow   chan struct{} // closed unless stalled
	pipes  map[*pipe]struct{}
	closed bool
	wg     sync.WaitGroup

	conns, late, lateReplies, afterClose, lost atomic.Int64
	pending                                    atomic.Int64 // chunks read from clients, not yet written or dropped
}

// New starts a proxy to target ("host:port") in Pass, listening on
// 127.0.0.1 on a free port; see Addr.
func New(target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("faultproxy: empty target")
	}
	return NewFunc(func() string { return target })
}

// NewFunc is New for a target that may move: target is called for every
// new client connection, and the proxy dials what it returns then (a
// connection it cannot dial, "" included, is reset at once). Open
// connections stay with the server they were dialled to.
func NewFunc(target func() string) (*Proxy, error) {
	if target == nil {
		return nil, errors.New("faultproxy: nil target")
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

// Target returns the address the proxy forwards new connections to.
func (p *Proxy) Target() string { return p.target() }

// Set switches the fault, for open and new connections; a negative delay
// counts as zero. Leaving Stall delivers what was queued; switching to Cut
// closes every open connection before Set returns.
func (p *Proxy) Set(f Fault) {
	f.Delay, f.ReplyDelay = max(f.Delay, 0), max(f.ReplyDelay, 0)
	p.mu.Lock()
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
	var cut []*pipe
	if f.Kind == Cut {
		for c := range p.pipes {
			cut = append(cut, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.abort()
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
	return Stats{Conns: p.conns.Load(), LateChunks: p.late.Load(), LateReplies: p.lateReplies.Load(),
		AfterClose: p.afterClose.Load(), LostReplies: p.lost.Load()}
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
		if p.Fault().Kind == Cut {
			reset(client)
			continue
		}
		p.wg.Go(func() { p.handle(client) })
	}
}

// handle dials the target for one client connection and forwards until
// both sides are done.
func (p *Proxy) handle(client net.Conn) {
	d := net.Dialer{Timeout: DialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target())
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
	if p.fault.Kind == Cut { // cut while dialling
		p.mu.Unlock()
		reset(client)
		_ = server.Close()
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
