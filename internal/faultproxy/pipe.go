package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// pipe is one client connection and its server connection. Three
// goroutines serve it: a reader of the client, a writer to the server (the
// goroutine that runs run), and the server-to-client direction.
type pipe struct {
	p              *Proxy
	client, server net.Conn
	clientGone     atomic.Bool // the client closed (or broke) its sending side

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

// chunk is what one read from the client returned, and when it may be
// written to the server.
type chunk struct {
	data []byte
	at   time.Time
}

// run forwards until the pipe is done: the client closed and everything
// it sent was delivered, the server closed, a reply was lost, or the proxy
// closed.
func (c *pipe) run() {
	chunks := make(chan chunk, 64)
	var wg sync.WaitGroup
	wg.Go(func() { c.readClient(chunks) })
	wg.Go(c.down)
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
			if f := c.p.Fault(); f.Kind == Late {
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
		if wait := time.Until(ch.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.aborted:
				c.p.pending.Add(-1)
				return
			}
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

// down forwards the server's replies to the client. Under LoseReply it
// drops the first reply chunk and cuts the pipe. After the client left,
// replies are read and dropped (and nothing is cut: a reply to nobody is
// not lost, and held bytes still go out). When the server closes, the pipe
// is cut.
func (c *pipe) down() {
	defer c.abort()
	buf := make([]byte, 32<<10)
	clientOK := true
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			if clientOK && !c.clientGone.Load() && c.p.Fault().Kind == LoseReply {
				c.p.lost.Add(1)
				return
			}
			if !c.flowing() {
				return
			}
			if clientOK {
				if _, werr := c.client.Write(buf[:n]); werr != nil {
					clientOK = false // gone: keep reading until the server closes
				}
			}
		}
		if err != nil {
			return
		}
	}
}
