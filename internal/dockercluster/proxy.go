package dockercluster

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy is the in-process TCP forwarder in front of each node: clients dial
// 127.0.0.1:<proxy port>, and every accepted connection is forwarded to the
// container's published port as it is at dial time. It gives each node an
// address that never changes and injects latency without kernel support (the
// CI kernel has no sch_netem, so tc netem is not an option): data flowing from
// Redis to the client is held for the configured delay before being written,
// which adds the delay to every round trip on new and already open
// connections alike, without limiting throughput.
type proxy struct {
	ln     net.Listener
	target func() string // current "127.0.0.1:port" of the container
	delay  atomic.Int64  // nanoseconds added to every Redis -> client chunk

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newProxy(target func() string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers c so close can tear it down; false once the proxy is closed.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	backend, err := net.DialTimeout("tcp", p.target(), 5*time.Second)
	if err != nil {
		// Nothing listens (node killed or disconnected): reset the client so it
		// fails fast, as a refused connection would.
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	}
	if !p.track(backend) {
		_ = backend.Close()
		return
	}
	defer p.untrack(backend)

	done := make(chan struct{}, 2)
	go func() { // client -> Redis, undelayed
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if _, werr := backend.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { // Redis -> client, delayed
		p.delayedCopy(client, backend)
		done <- struct{}{}
	}()
	<-done
	// One direction ended: close both so the other unblocks, then wait for it.
	_ = client.Close()
	_ = backend.Close()
	<-done
}

type chunk struct {
	data []byte
	at   time.Time
}

// delayedCopy copies src to dst, writing each chunk read at time T no earlier
// than T+delay (the delay is read when the chunk is written, so ClearLatency
// takes effect immediately).
func (p *proxy) delayedCopy(dst, src net.Conn) {
	ch := make(chan chunk, 256)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{data: buf[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range ch {
		if failed {
			continue // drain so the reader can exit
		}
		if wait := time.Until(c.at.Add(time.Duration(p.delay.Load()))); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(c.data); err != nil {
			failed = true
			_ = src.Close() // unblock the reader
		}
	}
}

// close stops accepting, closes every forwarded connection and waits for all
// goroutines to exit.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	_ = p.ln.Close()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
