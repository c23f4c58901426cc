package goredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/go-redis/v9"
)

// wire is the node's own connection to a standalone master, over which the
// hot commands (Acquire, Release, Extend, AcquireFenced, RaiseFence) go
// instead of through the go-redis client: one connection, dialled with the
// client's own Dialer and Addr and greeted as the client's options ask
// (AUTH, SELECT, CLIENT SETNAME), commands encoded by hand into one reused
// buffer and replies read without allocating (resp.go; but for the string
// of a fair release's grant within the process). A go-redis command
// costs about eleven allocations and a connection-health syscall per pool
// Get; these cost none.
//
// Concurrency is the coalescer's (pipeline.go), over this connection: a
// caller that finds the connection idle writes its command and reads its
// reply itself, on its own deadline; callers that arrive meanwhile queue
// up, and a sender goroutine writes each queued batch in one write and
// reads its replies in order, exiting as soon as a batch lands with the
// queue empty. A queued caller whose context ends while its command is
// still queued withdraws it (never sent); one whose command is in flight
// returns at once, its outcome unknown, and the sender still reads the
// reply (so that no later command is answered with it) and drops it; once
// every caller of a batch has given up, the batch is cut short (its
// connection's deadline set to now, which closes it).
//
// Split calls (redlock.Starter): a lone caller may write its command
// (start) and come back for the reply later (finish), after reading
// other nodes' replies. If callers queue behind it meanwhile, the sender
// takes its call over (takeOver): it writes their batch at once behind it
// and reads its reply first, so nobody waits for the lone caller's other
// nodes. A lone caller that comes for its reply after its deadline (the
// round's slowest node took it) still reads a reply that is already
// there, waiting at most lateRead for one that is not. A call started
// while the connection is down is queued for the sender, which dials:
// a dial the node never answers lasts until the deadline, and made by
// the round's caller it would keep the other nodes' calls from starting
// in time (TestRoundsWithANodeWhoseDialIsNeverAnswered). A batch whose
// callers all gave up while it was dialled for is not written (connect).
//
// Scripts go as EVAL the first time on each connection, EVALSHA after:
// a fresh server's NOSCRIPT would cost a second round trip, which a split
// call makes only at finish. A NOSCRIPT later (SCRIPT FLUSH) is answered
// with EVAL, as in script.go.
//
// Safety, as the Backend contract asks. A command is written once and
// never again. Every read and write is bounded by the call's deadline
// (conn.SetDeadline; a batch by the latest of its callers', so each
// caller is bounded by its own as above). Any I/O error, timeout or
// malformed reply closes the connection at once, so a late reply can
// never be read as the answer to a later command, and every command whose
// reply was not read fails (outcome unknown). The next call redials,
// bounded by its own context.
//
// Cancellation: a lone caller that writes and reads itself is bounded by
// its deadline, not by its cancellation while reading, exactly as with
// go-redis (see coalescer); queued callers honour both.
//
// Lifetime: the connection stays open while the process runs, or until
// the node's Close; it holds no goroutine while idle.
type wire struct {
	name    string
	opt     *redis.Options
	pollFor time.Duration // WithReplyPoll

	mu     sync.Mutex
	busy   bool     // the connection is in use by a lone caller or the sender
	closed bool     // Close was called
	queue  []*wcall // waiting for the next batch, in arrival order
	spare  []*wcall // the last batch's slice, for the next queue
	sender func()   // w.send as a func value, made once
	live   int      // callers of the batch in flight still waiting for it
	solo   *wcall   // a lone call written, whose reply its caller has not begun to read
	carry  *wcall   // a lone call handed to the sender, which reads its reply first
	flight net.Conn // the connection carrying the batch in flight, once written

	// Owned by whoever set busy.
	conn  net.Conn // nil when closed
	br    *bufio.Reader
	buf   []byte
	until time.Time // the deadline set on conn by the last write
	known uint32    // the scripts (bit script.id) sent to conn's server, by EVAL
	poll  poller    // looking for a lone caller's reply before parking (replypoll.go)
}

// lateRead is how long a lone caller who comes for its reply after its
// deadline (see wcall.finish) waits for it: only long enough to read a
// reply that is already there.
const lateRead = time.Millisecond

// errAbandoned is the result, read by nobody, of the calls of a batch
// that the sender did not write because all their callers had given up.
var errAbandoned = errors.New("goredis: not sent: every caller gave up while the node was dialled")

// errNodeClosed is the error of a call after the node's Close.
var errNodeClosed = fmt.Errorf("goredis: node closed: %w", net.ErrClosed)

// newWire returns the node's own connection for client c, or nil when
// the node must keep go-redis's: a cluster, failover or ring client, a
// node WithReplicaAck (its WAIT must follow the write on one pooled
// connection), WithClientPool, or options this connection cannot honour
// (an OnConnect hook, a StreamingCredentialsProvider, a Limiter).
func newWire(c redis.UniversalClient, o *options, name string) *wire {
	rc, ok := c.(*redis.Client)
	if !ok || o.clientPool || o.ackSet || o.failover != nil {
		return nil
	}
	opt := rc.Options()
	if opt.Addr == failoverAddr || opt.Dialer == nil || opt.OnConnect != nil ||
		opt.StreamingCredentialsProvider != nil || opt.Limiter != nil {
		return nil
	}
	return &wire{name: name, opt: opt, pollFor: o.pollFor()}
}

// op is what a wire command does.
type op uint8

const (
	opSet    op = iota // SET key token PX n NX
	opScript           // EVALSHA (or EVAL) of s: 1 key, or 2 (key, key:fence) with fenced, or (key, its queue) for a transfer, or 4 (key, its queue keys) with queued
)

// The suffixes of a key's queue keys (redlock.QueueKeys).
var queueSuffixes = func() [3]string {
	q, exp, grants := redlock.QueueKeys("")
	return [3]string{q, exp, grants}
}()

// command is one hot command, encoded without allocating.
type command struct {
	op     op
	s      *script
	eval   bool // EVAL with the source: after a NOSCRIPT
	fenced bool // KEYS are key and key + fenceSuffix
	queued bool // KEYS are key and its queue keys (the fair scripts, below)
	key    string
	token  string
	next   string // Transfer's new token, after token; "" for none
	flag   string // Release's announce flag; "" when n is the last argument
	hands  bool   // FairLua.Release returns, not announces, a grant to the releasing locker's waiter (ARGV[5])
	n      int64  // TTL in ms, or a fence
	// The fair scripts' other arguments (queued): FairLua.Acquire's
	// (token, n as the TTL, then ticket, score, stay, attempt), or, with
	// flag set, FairLua.Release's (token, flag, ticket, grant).
	ticket               string
	grant                string
	score, stay, attempt int64
}

// encode appends c; a script as EVAL with its source when eval is set,
// as EVALSHA otherwise.
func (c *command) encode(b []byte, eval bool) []byte {
	if c.op == opSet {
		b = appendArray(b, 6)
		b = appendBulk(b, "SET")
		b = appendBulk(b, c.key)
		b = appendBulk(b, c.token)
		b = appendBulk(b, "PX")
		b = appendBulkInt(b, c.n)
		return appendBulk(b, "NX")
	}
	n := 6
	switch {
	case c.fenced:
		n = 7
	case c.queued && c.flag != "" && c.hands:
		n = 12
	case c.queued && c.flag != "":
		n = 11
	case c.queued:
		n = 13
	}
	if c.next != "" {
		n += 2 // the new token, and the queue's key
	}
	b = appendArray(b, n)
	if eval {
		b = appendBulk(b, "EVAL")
		b = appendBulk(b, c.s.src)
	} else {
		b = appendBulk(b, "EVALSHA")
		b = appendBulk(b, c.s.sha)
	}
	if c.fenced {
		b = appendBulk(b, "2")
		b = appendBulk(b, c.key)
		b = appendBulkSuffixed(b, c.key, fenceSuffix)
	} else if c.next != "" { // Transfer's: the key and its queue
		b = appendBulk(b, "2")
		b = appendBulk(b, c.key)
		b = appendBulkSuffixed(b, c.key, queueSuffixes[0])
	} else if c.queued {
		b = appendBulk(b, "4")
		b = appendBulk(b, c.key)
		for _, suffix := range queueSuffixes {
			b = appendBulkSuffixed(b, c.key, suffix)
		}
	} else {
		b = appendBulk(b, "1")
		b = appendBulk(b, c.key)
	}
	b = appendBulk(b, c.token)
	if c.queued {
		if c.flag != "" {
			b = appendBulk(b, c.flag)
			b = appendBulk(b, c.ticket)
			b = appendBulk(b, c.grant)
			if c.hands {
				b = appendBulk(b, "1")
			}
			return b
		}
		b = appendBulkInt(b, c.n)
		b = appendBulk(b, c.ticket)
		b = appendBulkInt(b, c.score)
		b = appendBulkInt(b, c.stay)
		return appendBulkInt(b, c.attempt)
	}
	if c.next != "" {
		b = appendBulk(b, c.next)
	}
	if c.flag != "" {
		return appendBulk(b, c.flag)
	}
	return appendBulkInt(b, c.n)
}

// appendBulkSuffixed appends key + suffix as one argument.
func appendBulkSuffixed(b []byte, key, suffix string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(key)+len(suffix)), 10)
	b = append(b, '\r', '\n')
	b = append(b, key...)
	b = append(b, suffix...)
	return append(b, '\r', '\n')
}

// wcall is one caller's command on the wire, and the redlock.Pending of a
// started call. Pooled: a call allocates nothing.
type wcall struct {
	w     *wire
	ctx   context.Context
	cmd   command
	state uint8
	sent  bool          // guarded by w.mu: taken into a batch
	done  chan struct{} // capacity 1: receives once the sender read the reply
	kind  byte
	n     int64
	bulk  string // a bulk reply's string (replyBulk)
	err   error
}

// wcall states.
const (
	stDone   uint8 = iota // the result is there (an error before sending)
	stSolo                // written by its caller, who reads the reply
	stQueued              // queued for the sender
)

var wcalls = sync.Pool{New: func() any { return &wcall{done: make(chan struct{}, 1)} }}

// start sends cmd, or queues it behind the command in flight (or for a
// dial: start never dials), and returns the call; finish returns its
// reply. Every started call must be finished, by the goroutine that
// started it, in the order started.
func (w *wire) start(ctx context.Context, cmd command) *wcall {
	c := wcalls.Get().(*wcall)
	c.w, c.ctx, c.cmd = w, ctx, cmd
	if err := ctx.Err(); err != nil {
		c.state, c.err = stDone, err // a caller that gave up sends nothing
		return c
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		c.state, c.err = stDone, errNodeClosed
		return c
	}
	if w.busy {
		c.state = stQueued
		w.queue = append(w.queue, c)
		w.takeOver()
		w.mu.Unlock()
		return c
	}
	w.busy = true
	if w.conn == nil {
		// Not connected: the sender dials and writes it, and the caller
		// waits for it as a queued caller does. A dial takes a round
		// trip or more, and one to a node that does not answer (a host
		// down whose SYNs go unanswered, a partition that drops them)
		// lasts until the round's deadline: dialled by the caller, it
		// would hold back the start of the round's other nodes' calls
		// until then, and one such node would fail every round.
		c.state = stQueued
		w.queue = append(w.queue, c)
		w.startSender()
		w.mu.Unlock()
		return c
	}
	w.mu.Unlock()
	c.state = stSolo
	if err := w.write(deadline(ctx, w.opt), c); err != nil {
		c.state, c.err = stDone, err
		w.land()
		return c
	}
	w.mu.Lock()
	w.solo = c
	if len(w.queue) > 0 {
		w.takeOver()
	}
	w.mu.Unlock()
	return c
}

// takeOver, called with w.mu held when a caller queued up, hands the lone
// call whose reply nobody reads yet (w.solo) to a sender goroutine, which
// writes the queue at once behind it and reads its reply first. A round
// over Starters reads its nodes one after another: without this, callers
// queued on a node would wait while the lone caller reads the other
// nodes' replies, as long as the slowest node's timeout when one stalls.
func (w *wire) takeOver() {
	c := w.solo
	if c == nil {
		return
	}
	w.solo, w.carry = nil, c
	c.sent = true
	w.startSender()
}

func (w *wire) startSender() {
	if w.sender == nil {
		w.sender = w.send
	}
	go w.sender()
}

// finish waits for c's reply (see start) and returns it: the reply's
// kind, integer and string (a bulk reply's), or the error. c is recycled.
func (c *wcall) finish() (kind byte, n int64, bulk string, err error) {
	w := c.w
	state := c.state
	if state == stSolo {
		w.mu.Lock()
		if w.solo == c {
			w.solo = nil // ours to read
		} else {
			state = stQueued // taken over: the sender reads it
		}
		w.mu.Unlock()
	}
	switch state {
	case stSolo:
		until := w.until
		if !until.IsZero() && !time.Now().Before(until) && w.br.Buffered() == 0 {
			// The deadline passed while the caller finished other nodes'
			// calls (a round over Starters reads one node after another):
			// a reply that came in time is waiting in the socket, but a
			// read past the deadline would not even look. Look, for at
			// most lateRead.
			until = time.Now().Add(lateRead)
			_ = w.conn.SetReadDeadline(until)
		}
		waiting.Add(1)
		if w.br.Buffered() == 0 {
			w.poll.await(until)
		}
		c.kind, c.n, c.bulk, c.err = w.read()
		waiting.Add(-1)
		w.land()
	case stQueued:
		waiting.Add(1)
		select {
		case <-c.done:
			waiting.Add(-1)
		case <-c.ctx.Done():
			waiting.Add(-1)
			w.mu.Lock()
			if !c.sent { // still queued: withdraw it, it was never sent
				if i := slices.Index(w.queue, c); i >= 0 {
					w.queue = slices.Delete(w.queue, i, i+1)
				}
				w.mu.Unlock()
				err := c.ctx.Err()
				c.recycle()
				return 0, 0, "", err
			}
			select {
			case <-c.done: // it landed just now: the reply is there
				w.mu.Unlock()
			default:
				// In flight: the sender still reads its reply and
				// signals c.done, so c is left to it, not recycled.
				// The last caller of the batch to give up cuts the
				// batch short: nobody waits for it any more.
				if w.live--; w.live == 0 && w.flight != nil {
					_ = w.flight.SetDeadline(time.Now())
				}
				w.mu.Unlock()
				return 0, 0, "", c.ctx.Err()
			}
		}
	}
	kind, n, bulk, err = c.kind, c.n, c.bulk, c.err
	c.recycle()
	return kind, n, bulk, err
}

func (c *wcall) recycle() {
	*c = wcall{done: c.done}
	wcalls.Put(c)
}

// land, by the holder of the connection once done with it, hands it to
// the sender if commands queued up meanwhile, and frees it otherwise.
func (w *wire) land() {
	w.mu.Lock()
	if len(w.queue) > 0 {
		w.startSender()
	} else {
		w.busy = false
		if w.closed {
			w.drop()
		}
	}
	w.mu.Unlock()
}

// send is the sender goroutine: it writes the queue as batches, reading
// each batch's replies in order, until a batch lands with nothing queued
// behind it.
func (w *wire) send() {
	w.mu.Lock()
	for len(w.queue) > 0 || w.carry != nil {
		carry := w.carry // written already: its reply comes first
		w.carry = nil
		batch := w.queue
		w.queue = w.spare
		closed := w.closed
		var latest time.Time // the latest deadline; none if one has none
		none := false
		if carry != nil {
			if d := deadline(carry.ctx, w.opt); d.IsZero() {
				none = true
			} else {
				latest = d
			}
		}
		for _, c := range batch {
			c.sent = true
			if d := deadline(c.ctx, w.opt); d.IsZero() {
				none = true
			} else if d.After(latest) {
				latest = d
			}
		}
		if none {
			latest = time.Time{}
		}
		w.live = len(batch)
		if carry != nil {
			w.live++
		}
		w.mu.Unlock()

		var err error
		switch {
		case carry != nil && len(batch) == 0:
			err = w.conn.SetDeadline(latest)
		case closed:
			err = errNodeClosed
		default:
			// A carried call went out on the connection that is up, so a
			// batch dialled for carries none: abandoning it leaves no
			// reply unread on the connection.
			dialled := w.conn == nil
			if err = w.connect(latest); err == nil {
				if dialled && w.abandoned() {
					err = errAbandoned
				} else {
					err = w.write(latest, batch...)
				}
			}
		}
		if err == nil {
			w.mu.Lock()
			w.flight = w.conn
			if w.live == 0 { // every caller gave up while it was written
				_ = w.conn.SetDeadline(time.Now())
			}
			w.mu.Unlock()
		}
		if carry != nil && err != nil {
			carry.err = err // the connection it went out on is closed
		} else if carry != nil {
			carry.kind, carry.n, carry.bulk, carry.err = w.read()
			if w.conn == nil { // the read failed: the rest are lost with the connection
				err = carry.err
			}
		}
		for _, c := range batch {
			if err != nil {
				c.err = err
				continue
			}
			c.kind, c.n, c.bulk, c.err = w.read()
			if w.conn == nil { // the read failed: the rest are lost with the connection
				err = c.err
			}
		}

		w.mu.Lock()
		w.flight = nil
		if carry != nil {
			carry.done <- struct{}{}
		}
		for _, c := range batch {
			c.done <- struct{}{}
		}
		clear(batch)
		w.spare = batch[:0]
	}
	w.busy = false
	if w.closed {
		w.drop()
	}
	w.mu.Unlock()
}

// deadline is the deadline of a command on ctx: ctx's, or without one the
// client's ReadTimeout from now (none if that is not positive either).
func deadline(ctx context.Context, opt *redis.Options) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	if opt.ReadTimeout > 0 {
		return time.Now().Add(opt.ReadTimeout)
	}
	return time.Time{}
}

// connect, by the sender, dials the connection if it is down, bounded by
// latest (the batch's latest deadline; none if zero): the only place the
// wire dials. The sender then does not write a batch whose callers all
// gave up while it dialled (abandoned): a call that ends before its
// command is sent sends nothing, as at start.
func (w *wire) connect(latest time.Time) error {
	if w.conn != nil {
		return nil
	}
	ctx := context.Background()
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	return w.dial(ctx, latest)
}

// abandoned reports whether every caller of the batch being sent has
// given up (w.live, which their finish counts down).
func (w *wire) abandoned() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.live == 0
}

// write, by the holder of the connection, which is up (start writes
// only on a connection that is, the sender after connect), writes the
// commands of calls in one write, bounded with their reads by d. On
// error the connection is closed.
func (w *wire) write(d time.Time, calls ...*wcall) error {
	if err := w.conn.SetDeadline(d); err != nil {
		w.drop()
		return w.fail(err)
	}
	w.until = d
	b := w.buf[:0]
	for _, c := range calls {
		// The first time a script goes over a connection it goes as
		// EVAL, which caches it on the server: a server just started or
		// restarted (a new connection) does not know it, and EVALSHA's
		// NOSCRIPT would cost a second round trip, after the first, which
		// a round over Starters makes only once it comes to read it.
		eval := c.cmd.eval
		if c.cmd.op == opScript && w.known&(1<<c.cmd.s.id) == 0 {
			w.known |= 1 << c.cmd.s.id
			eval = true
		}
		b = c.cmd.encode(b, eval)
	}
	w.buf = b
	if _, err := w.conn.Write(b); err != nil {
		w.drop()
		return w.fail(err)
	}
	return nil
}

// read, by the holder of the connection, reads one reply. An error reply
// leaves the connection in step; any other error closes it.
func (w *wire) read() (kind byte, n int64, bulk string, err error) {
	kind, n, bulk, err, fatal := readReply(w.br)
	if fatal {
		w.drop()
		return 0, 0, "", w.fail(err)
	}
	return kind, n, bulk, err
}

func (w *wire) fail(err error) error {
	return fmt.Errorf("goredis: node %s: %w", w.name, err)
}

// drop closes the connection; the next call redials.
func (w *wire) drop() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// dial connects with the client's Dialer and greets the server as the
// client's options ask: AUTH, SELECT, CLIENT SETNAME (RESP2: no HELLO).
func (w *wire) dial(ctx context.Context, d time.Time) error {
	opt := w.opt
	network := opt.Network
	if network == "" {
		network = "tcp"
	}
	conn, err := opt.Dialer(ctx, network, opt.Addr)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil { // say so: the dialler's "i/o timeout" matches neither
			return w.fail(fmt.Errorf("dial: %w: %w", cerr, err))
		}
		return w.fail(fmt.Errorf("dial: %w", err))
	}
	user, pass := opt.Username, opt.Password
	switch {
	case opt.CredentialsProviderContext != nil:
		if user, pass, err = opt.CredentialsProviderContext(ctx); err != nil {
			_ = conn.Close()
			return w.fail(fmt.Errorf("credentials: %w", err))
		}
	case opt.CredentialsProvider != nil:
		user, pass = opt.CredentialsProvider()
	}
	var b []byte
	var steps []string
	switch {
	case user != "":
		b = appendArray(b, 3)
		b = appendBulk(appendBulk(appendBulk(b, "AUTH"), user), pass)
		steps = append(steps, "AUTH")
	case pass != "":
		b = appendArray(b, 2)
		b = appendBulk(appendBulk(b, "AUTH"), pass)
		steps = append(steps, "AUTH")
	}
	if opt.DB != 0 {
		b = appendArray(b, 2)
		b = appendBulkInt(appendBulk(b, "SELECT"), int64(opt.DB))
		steps = append(steps, "SELECT")
	}
	if opt.ClientName != "" {
		b = appendArray(b, 3)
		b = appendBulk(appendBulk(appendBulk(b, "CLIENT"), "SETNAME"), opt.ClientName)
		steps = append(steps, "CLIENT SETNAME")
	}
	size := opt.ReadBufferSize
	if size <= 0 {
		size = 4096
	}
	br := bufio.NewReaderSize(conn, size)
	if len(steps) > 0 {
		err := conn.SetDeadline(d)
		if err == nil {
			_, err = conn.Write(b)
		}
		for _, step := range steps {
			if err != nil {
				break
			}
			var kind byte
			kind, _, _, err, _ = readReply(br)
			if err == nil && kind != replyStatus {
				err = fmt.Errorf("%w to %s", errProtocol, step)
			} else if err != nil {
				err = fmt.Errorf("%s: %w", step, err)
			}
		}
		if err != nil {
			_ = conn.Close()
			return w.fail(fmt.Errorf("handshake: %w", err))
		}
	}
	w.conn, w.br, w.known = conn, br, 0
	w.poll.reset(conn, w.pollFor)
	return nil
}

// close closes the connection now if idle, or else once its holder is
// done with it; calls after it fail with errNodeClosed.
func (w *wire) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if !w.busy {
		w.drop()
	}
	return nil
}

// do runs cmd and returns its reply. A script the node does not know
// (NOSCRIPT: it ran nothing) is sent again as EVAL, which is no resend.
func (w *wire) do(ctx context.Context, cmd command) (kind byte, n int64, err error) {
	kind, n, bulk, err := w.start(ctx, cmd).finish()
	kind, n, _, err = w.noScript(ctx, cmd, kind, n, bulk, err)
	return kind, n, err
}

func (w *wire) noScript(ctx context.Context, cmd command, kind byte, n int64, bulk string, err error) (byte, int64, string, error) {
	if err != nil && cmd.op == opScript && !cmd.eval && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd.eval = true
		return w.start(ctx, cmd).finish()
	}
	return kind, n, bulk, err
}

// replyBool is the answer of a command that sets or changes a key: SET's
// +OK (true) or nil (false), a script's 1 (true) or 0 (false).
func replyBool(o op, kind byte, n int64, err error) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case o == opSet && kind == replyStatus:
		return true, nil
	case o == opSet && kind == replyNil:
		return false, nil
	case o == opScript && kind == replyInt:
		return n == 1, nil
	}
	return false, fmt.Errorf("%w: reply kind %q to %s", errProtocol, kind, opName(o))
}

// scriptInt is the integer reply of a script.
func scriptInt(kind byte, n int64, err error) (int64, error) {
	switch {
	case err != nil:
		return 0, err
	case kind == replyInt:
		return n, nil
	}
	return 0, fmt.Errorf("%w: reply kind %q to a script", errProtocol, kind)
}

func opName(o op) string {
	if o == opSet {
		return "SET"
	}
	return "a script"
}

// Finish is redlock.Pending's: the reply of a started Acquire, Release,
// Extend, Transfer or ReleaseFair (wireNode).
//
// Of a ReleaseFair that returned its grant instead of announcing it (see
// FinishGrant), Finish reports the release and drops the grant.
func (c *wcall) Finish() (bool, error) {
	ok, _, err := c.FinishGrant()
	return ok, err
}

// FinishGrant is redlock.GrantPending's: Finish's answer, and of a started
// ReleaseFair, the grant FairLua.Release returned to the releasing locker
// instead of announcing it ("" when it made none, or announced it).
func (c *wcall) FinishGrant() (ok bool, grant string, err error) {
	w, ctx, cmd := c.w, c.ctx, c.cmd
	kind, n, bulk, err := c.finish()
	kind, n, bulk, err = w.noScript(ctx, cmd, kind, n, bulk, err)
	if err == nil && kind == replyBulk && cmd.hands {
		return true, bulk, nil // it deleted the key, then granted
	}
	if cmd.next != "" { // a transfer
		ok, err = transferReply(scriptInt(kind, n, err))
		return ok, "", err
	}
	ok, err = replyBool(cmd.op, kind, n, err)
	return ok, "", err
}

// FinishFair is redlock.FairPending's: the reply of a started
// AcquireFair (wireNode).
func (c *wcall) FinishFair() (bool, int64, error) {
	w, ctx, cmd := c.w, c.ctx, c.cmd
	kind, n, bulk, err := c.finish()
	kind, n, _, err = w.noScript(ctx, cmd, kind, n, bulk, err)
	return fairReply(scriptInt(kind, n, err))
}
