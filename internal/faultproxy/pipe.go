package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pipe is one client connection and its server connection. Four
// goroutines serve it: a reader of the client, a writer to the server (the
// goroutine that runs run), a reader of the server and a writer to the
// client.
type pipe struct {
	p              *Proxy
	client, server net.Conn
	clientGone     atomic.Bool // the client closed (or broke) its sending side
	clientDeaf     atomic.Bool // a write to the client failed

	once    sync.Once
	aborted chan struct{} // closed by abort
}

func newPipe(p *Proxy, client, server net.Conn) *pipe {
	return &pipe{p: p, client: client, server: server, aborted: make(chan struct{})}
}

// abort cuts both connections at once; whatever is held is dropped. Every
// goroutine of the pipe then ends.
func (c *pipe) abort() {
	c.once.Do(func() {
		close(c.aborted)
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// chunk is what one read returned, and when it may be written on.
type chunk struct {
	data []byte
	at   time.Time
}

// run forwards until the pipe is done: the client closed and everything
// it sent was delivered, the server closed, a reply was lost, or the proxy
// closed.
func (c *pipe) run() {
	chunks := make(chan chunk, 64)
	replies := make(chan chunk, 64)
	var wg sync.WaitGroup
	wg.Go(func() { c.readClient(chunks) })
	wg.Go(func() { c.readServer(replies) })
	wg.Go(func() { c.down(replies) })
	c.up(chunks)
	c.abort()
	for range chunks { // what was read but will never be written
		c.p.pending.Add(-1)
	}
	wg.Wait()
}

// readClient reads the client's bytes and stamps each chunk with its
// delivery time, fixed now by the fault in force. It ends when the client
// closes (or the pipe is cut) and then closes chunks.
func (c *pipe) readClient(chunks chan<- chunk) {
	defer close(chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := c.client.Read(buf)
		if n > 0 {
			at := time.Now()
			if f := c.p.Fault(); f.Kind == Late && f.Delay > 0 {
				at = at.Add(f.Delay)
				c.p.late.Add(1)
			}
			c.p.pending.Add(1)
			select {
			case chunks <- chunk{buf[:n], at}:
			case <-c.aborted:
				c.p.pending.Add(-1)
				return
			}
		}
		if err != nil {
			c.clientGone.Store(true)
			return
		}
	}
}

// up writes the client's chunks to the server, each at its time and only
// while not stalled. When the client has closed and everything it sent is
// written, it half-closes the server connection (the FIN after the data)
// and waits for the server to close its side, which ends down and cuts
// the pipe.
func (c *pipe) up(chunks <-chan chunk) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ch := range chunks {
		if !c.wait(timer, ch.at) {
			c.p.pending.Add(-1)
			return
		}
		if !c.flowing() {
			c.p.pending.Add(-1)
			return
		}
		if c.clientGone.Load() {
			c.p.afterClose.Add(1)
		}
		_, err := c.server.Write(ch.data)
		c.p.pending.Add(-1)
		if err != nil {
			return
		}
	}
	if tc, ok := c.server.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	drain := time.NewTimer(drainTimeout)
	defer drain.Stop()
	select {
	case <-c.aborted:
	case <-drain.C:
	}
}

// wait waits until at; it reports false if the pipe was cut first.
func (c *pipe) wait(timer *time.Timer, at time.Time) bool {
	wait := time.Until(at)
	if wait <= 0 {
		return true
	}
	timer.Reset(wait)
	select {
	case <-timer.C:
		return true
	case <-c.aborted:
		return false
	}
}

// flowing waits until traffic may flow; it reports false if the pipe was
// cut first. Leaving a stall closes the channel gate returned, so one
// look suffices.
func (c *pipe) flowing() bool {
	select {
	case <-c.p.gate():
		return true
	case <-c.aborted:
		return false
	}
}

// readServer reads the server's replies and stamps each chunk with its
// delivery time, fixed now by the fault in force. Under LoseReply it drops
// the first reply chunk and cuts the pipe; after the client left, a reply
// goes to nobody and is not lost (nothing is cut: held bytes still go
// out). It ends when the server closes (or the pipe is cut) and then
// closes replies.
func (c *pipe) readServer(replies chan<- chunk) {
	defer close(replies)
	for {
		buf := make([]byte, 32<<10)
		n, err := c.server.Read(buf)
		if n > 0 {
			at := time.Now()
			switch f := c.p.Fault(); {
			case f.Kind == LoseReply && !c.clientGone.Load() && !c.clientDeaf.Load():
				c.p.lost.Add(1)
				c.abort()
				return
			case f.Kind == Late && f.ReplyDelay > 0:
				at = at.Add(f.ReplyDelay)
				c.p.lateReplies.Add(1)
			}
			select {
			case replies <- chunk{buf[:n], at}:
			case <-c.aborted:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down writes the server's replies to the client, each at its time and
// only while not stalled. Once a write to the client failed, replies are
// dropped until the server closes. When the server has closed and every
// reply is written, the pipe is cut.
func (c *pipe) down(replies <-chan chunk) {
	defer c.abort()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for r := range replies {
		if !c.wait(timer, r.at) || !c.flowing() {
			return
		}
		if c.clientDeaf.Load() {
			continue
		}
		if _, err := c.client.Write(r.data); err != nil {
			c.clientDeaf.Store(true) // gone: keep reading until the server closes
		}
	}
}
