// Package latencyproxy is a TCP forwarder for fault tests: it stands
// between clients and one server on 127.0.0.1 and can slow the traffic
// down, hold it, or cut the server off, without root, kernel modules or
// Docker. (tc netem needs the sch_netem module, which the test machines'
// kernels lack: "Specified qdisc kind is unknown".)
//
// Faults, as a client of Addr sees them:
//
//   - SetDelay(up, down): every chunk read from the client reaches the
//     server up later, every chunk from the server reaches the client down
//     later; each round trip grows by up+down. Throughput is not limited,
//     and the delay applies to open and new connections alike.
//   - Hold: packets vanish. Connections stay open, new ones are accepted,
//     and nothing is forwarded in either direction until Release, which
//     delivers what was queued, in order (as TCP retransmission would after
//     a partition heals, so commands sent during the hold may still run).
//   - Cut: the server drops off the network. Open connections are closed,
//     new ones are reset at once, and nothing queued is delivered; the
//     server itself keeps running with its data. Release ends the cut.
//
// Every goroutine the proxy starts ends by Close.
package latencyproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// DialTimeout bounds connecting to the target for each client connection.
const DialTimeout = 5 * time.Second

// Proxy forwards connections accepted on its own 127.0.0.1 port to a
// target. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target func() string

	mu       sync.Mutex
	up, down time.Duration
	held     chan struct{} // closed while traffic flows; open while held
	cut      bool
	conns    map[*pipe]struct{}
	closed   bool
	ctx      context.Context // cancelled by Close, to abort dials
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New starts a proxy to target, a "host:port" read again for every new
// client connection (so a server that moved is followed). The proxy listens
// on 127.0.0.1 on a free port; see Addr.
func New(target func() string) (*Proxy, error) {
	if target == nil {
		return nil, errors.New("latencyproxy: nil target")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("latencyproxy: listen: %w", err)
	}
	flowing := make(chan struct{})
	close(flowing)
	p := &Proxy{ln: ln, target: target, held: flowing, conns: map[*pipe]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Go(p.serve)
	return p, nil
}

// Addr returns the "127.0.0.1:port" clients connect to. It never changes.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of the client-to-server (up) and server-to-client
// (down) directions, replacing the previous ones. Negative delays count as
// zero. A chunk already waiting is released by the delay in force when its
// time comes, so lowering the delay takes effect at once.
func (p *Proxy) SetDelay(up, down time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up, p.down = max(up, 0), max(down, 0)
}

// Hold stops forwarding in both directions until Release; see the package
// comment.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isFlowing() {
		p.held = make(chan struct{})
	}
}

// Cut closes every open connection and resets new ones until Release; see
// the package comment.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	pipes := p.conns
	p.conns = map[*pipe]struct{}{}
	p.mu.Unlock()
	for c := range pipes {
		c.close()
	}
}

// Release ends a Hold (delivering what was queued) or a Cut.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if !p.isFlowing() {
		close(p.held)
	}
}

func (p *Proxy) isFlowing() bool {
	select {
	case <-p.held:
		return true
	default:
		return false
	}
}

// Close stops accepting, closes every connection and waits until all the
// proxy's goroutines have ended. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cancel()
	pipes := p.conns
	p.conns = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range pipes {
		c.close()
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
		p.mu.Lock()
		closed, cut := p.closed, p.cut
		p.mu.Unlock()
		if closed || cut {
			reset(client)
			continue
		}
		p.wg.Go(func() { p.forward(client) })
	}
}

// reset closes c with an RST, so the client fails at once as on a refused
// connection.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// pipe is one client connection and its server connection.
type pipe struct {
	client, server net.Conn
	once           sync.Once
	gone           chan struct{} // closed when either side is closed
}

func (c *pipe) close() {
	c.once.Do(func() {
		close(c.gone)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

func (p *Proxy) forward(client net.Conn) {
	var d net.Dialer
	ctx, cancel := context.WithTimeout(p.ctx, DialTimeout)
	server, err := d.DialContext(ctx, "tcp", p.target())
	cancel()
	if err != nil {
		reset(client) // nothing listens: fail fast, like a refused connection
		return
	}
	c := &pipe{client: client, server: server, gone: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.cut {
		p.mu.Unlock()
		reset(client)
		_ = server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()

	var wg sync.WaitGroup
	wg.Go(func() { p.copy(c, server, client, func() time.Duration { return p.delays(true) }) })
	wg.Go(func() { p.copy(c, client, server, func() time.Duration { return p.delays(false) }) })
	wg.Wait()
}

func (p *Proxy) delays(up bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up {
		return p.up
	}
	return p.down
}

func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

type chunk struct {
	data []byte
	at   time.Time
}

// copy moves src to dst chunk by chunk, each no earlier than delay after
// it was read and only while traffic flows. When either side ends, the
// whole pipe is closed.
func (p *Proxy) copy(c *pipe, dst, src net.Conn, delay func() time.Duration) {
	chunks := make(chan chunk, 64)
	var wg sync.WaitGroup
	defer wg.Wait() // then the reader, unblocked by the close, ends
	defer c.close() // first
	wg.Go(func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{buf[:n], time.Now()}:
				case <-c.gone:
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ch := range chunks {
		for {
			wait := time.Until(ch.at.Add(delay()))
			if wait <= 0 {
				break
			}
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.gone:
				return
			}
		}
		select {
		case <-p.gate():
		case <-c.gone:
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}
