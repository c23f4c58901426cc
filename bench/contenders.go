// Package bench measures github.com/quorumlock/redlock against the locks a
// user would otherwise pick: github.com/go-redsync/redsync/v4 (Redlock) and
// github.com/bsm/redislock (one instance), plus a hand-written raw floor;
// and the library's two adapters against each other: go-redis (package
// goredis, the contender "redlock") and rueidis (package rueidisnode, the
// contender "redlock-rueidis").
//
// It is a separate module so that the library's go.mod never depends on its
// competitors. Every contender implements [Contender] over the same go-redis
// clients, and the scenarios in bench_test.go run each of them in turn
// against the same redis-server processes in one run, so ratios between
// contenders are measured under the same conditions. See BENCHMARKS.md at
// the repository root for the commands and the figures.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/rueidisnode"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// TTL is the lock lifetime every contender is configured with.
const TTL = 10 * time.Second

// ErrBusy is what a Contender returns when one attempt found the key held.
var ErrBusy = errors.New("bench: key held")

// busy is a contender's own refusal as ErrBusy. It formats nothing until
// asked: fmt.Errorf would build the message of every refusal, a cost the
// caller of a TryLock (an HTTP 409) does not pay, and the raw floor's
// bare ErrBusy does not either.
type busy struct{ err error }

func (e busy) Error() string        { return ErrBusy.Error() + ": " + e.err.Error() }
func (e busy) Is(target error) bool { return target == ErrBusy }
func (e busy) Unwrap() error        { return e.err }

// A Contender is one lock implementation under test. Acquire with wait
// false makes exactly one attempt (the "TryLock" of each library); with wait
// true it follows the contender's own retry configuration, which is part of
// what the contended scenarios measure.
type Contender interface {
	Acquire(ctx context.Context, key string, wait bool) (Held, error)
}

// Held is an acquired lock.
type Held interface {
	Unlock(ctx context.Context) error
	// Extend pushes the expiry out to TTL from now.
	Extend(ctx context.Context) error
}

// Impl names a contender; the names are the impl= part of the
// sub-benchmark names, so benchstat can compare them column by column.
type Impl string

// The contenders. RedsyncDefault uses redsync's defaults (32 tries, a
// random 50–250 ms delay); Redsync1ms replaces the delay with 1 ms through
// redsync.WithRetryDelay. Redislock exists for one node only. Redlock is
// this library on its go-redis adapter, RedlockRueidis the same lockers on
// its rueidis adapter, with rueidis clients of their own to the same
// servers (rueidis defaults), and RedlockRueidisFlush the same with
// rueidis's MaxFlushDelay set to FlushDelay. RedlockFair is Redlock whose
// waiting Lock calls join the queue on the nodes from their first
// attempt (redlock.WithFairness), where Redlock's join it once another
// process's lock refused them; it runs in the hand-off scenarios only.
// IdealHandoff is no lock but the fastest hand-off one round allows, with
// no safety logic (see ideal); it runs in the hand-off scenarios only.
// IdealQueued is IdealHandoff whose waiters also register with the nodes,
// the least a lock that learns of its waiters from the nodes adds (see
// ideal).
const (
	Redlock             Impl = "redlock"
	RedlockFair         Impl = "redlock-fair"
	RedlockRueidis      Impl = "redlock-rueidis"
	RedlockRueidisFlush Impl = "redlock-rueidis-flushdelay"
	RedsyncDefault      Impl = "redsync"
	Redsync1ms          Impl = "redsync-1ms"
	Redislock           Impl = "redislock"
	Raw                 Impl = "raw"
	IdealHandoff        Impl = "ideal-handoff"
	IdealQueued         Impl = "ideal-queued"
)

// New builds contender impl over clients, one per independent master.
// It returns an error for Redislock with more than one client. A contender
// that opens connections of its own (RedlockRueidis) has a Close method.
func New(impl Impl, clients []*redis.Client) (Contender, error) {
	switch impl {
	case Redlock:
		return newRedlock(clients, waitOpt)
	case RedlockFair:
		return newRedlock(clients, fairWaitOpt)
	case RedlockRueidis:
		return newRedlockRueidis(clients, 0)
	case RedlockRueidisFlush:
		return newRedlockRueidis(clients, FlushDelay)
	case RedsyncDefault:
		return newRedsync(clients), nil
	case Redsync1ms:
		return newRedsync(clients, redsync.WithRetryDelay(time.Millisecond)), nil
	case Redislock:
		if len(clients) != 1 {
			return nil, fmt.Errorf("bench: redislock locks on one instance, not %d", len(clients))
		}
		return &redislockC{c: redislock.New(clients[0])}, nil
	case Raw:
		return newRaw(clients)
	case IdealHandoff:
		return newIdeal(clients, false)
	case IdealQueued:
		return newIdeal(clients, true)
	}
	return nil, fmt.Errorf("bench: unknown contender %q", impl)
}

// ---- redlock (this project) ----

// WaitStrategy is what the redlock contender waits with when asked to:
// the library's own Retry, starting at 1 ms like Redsync1ms.
var WaitStrategy = redlock.Retry(8, time.Millisecond)

type redlockC struct {
	l     redlock.Locker
	wait  []redlock.Option // what a waiting Lock call adds
	close func()           // nil: nothing of its own to close
}

// Close closes the clients the contender made for itself.
func (c *redlockC) Close() {
	if c.close != nil {
		c.close()
	}
}

// newRedlock is the library on its go-redis adapter over clients; wait
// is what its waiting Lock calls add. Its Close ends the nodes' lingering
// subscriptions.
func newRedlock(clients []*redis.Client, wait []redlock.Option) (Contender, error) {
	bs := make([]driver.Node, len(clients))
	nodes := make([]*goredis.Node, 0, len(clients))
	closeAll := func() {
		for _, n := range nodes {
			n.Close()
		}
	}
	for i, c := range clients {
		n, err := goredis.New(c)
		if err != nil {
			closeAll()
			return nil, err
		}
		bs[i] = n
		nodes = append(nodes, n)
	}
	l, err := newLocker(bs)
	if err != nil {
		closeAll()
		return nil, err
	}
	l.wait, l.close = wait, closeAll
	return l, nil
}

func newLocker(bs []driver.Node) (*redlockC, error) {
	opts := []redlock.Option{redlock.WithTTL(TTL), redlock.WithStrategy(redlock.Reject())}
	r, err := redlock.New(bs, opts...)
	return &redlockC{l: r}, err
}

// FlushDelay is the MaxFlushDelay of RedlockRueidisFlush. rueidis writes
// what its pipeline holds as soon as its writer finds nothing more queued,
// which under concurrency on few cores means about one write syscall per
// command; MaxFlushDelay makes the writer pause (at most that long, and
// only while other calls are in flight) so that more commands share a
// write. rueidis's documentation suggests about 20 µs; on the 2-core test
// machine 100 µs did better at 5 nodes in a few quick rounds, so that is
// the value measured.
const FlushDelay = 100 * time.Microsecond

// newRedlockRueidis is newRedlock on the rueidis adapter: one rueidis
// client per master, with rueidis's defaults (its auto-pipelining
// included, client-side caching left on as it costs nothing here) but for
// flushDelay, made for the contender and closed by its Close.
func newRedlockRueidis(clients []*redis.Client, flushDelay time.Duration) (Contender, error) {
	rcs := make([]rueidis.Client, 0, len(clients))
	closeAll := func() {
		for _, c := range rcs {
			c.Close()
		}
	}
	bs := make([]driver.Node, len(clients))
	for i, c := range clients {
		rc, err := rueidis.NewClient(rueidisnode.Guard(rueidis.ClientOption{InitAddress: []string{c.Options().Addr}, MaxFlushDelay: flushDelay}))
		if err != nil {
			closeAll()
			return nil, err
		}
		rcs = append(rcs, rc)
		if bs[i], err = rueidisnode.New(rc); err != nil {
			closeAll()
			return nil, err
		}
	}
	l, err := newLocker(bs)
	if err != nil {
		closeAll()
		return nil, err
	}
	l.close = closeAll
	return l, nil
}

// waitOpt is what the redlock contenders' waiting Lock calls add: the
// strategy; fairWaitOpt, RedlockFair's, adds WithFairness: a call
// joins the queue on the nodes from its first attempt, not only once
// another process's lock refused it.
var (
	waitOpt     = []redlock.Option{redlock.WithStrategy(WaitStrategy)}
	fairWaitOpt = []redlock.Option{redlock.WithStrategy(WaitStrategy), redlock.WithFairness(true)}
)

func (c *redlockC) Acquire(ctx context.Context, key string, wait bool) (Held, error) {
	var opts []redlock.Option
	if wait {
		opts = c.wait
		if opts == nil {
			opts = waitOpt
		}
	}
	l, err := c.l.Lock(ctx, key, opts...)
	if errors.Is(err, redlock.ErrNotAcquired) {
		return nil, busy{err}
	}
	if err != nil {
		return nil, err
	}
	return redlockHeld{l}, nil
}

type redlockHeld struct{ l *redlock.Lock }

func (h redlockHeld) Unlock(ctx context.Context) error { return h.l.Unlock(ctx) }
func (h redlockHeld) Extend(ctx context.Context) error { return h.l.Extend(ctx, TTL) }

// ---- redsync ----

type redsyncC struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func newRedsync(clients []*redis.Client, opts ...redsync.Option) *redsyncC {
	pools := make([]rsredis.Pool, len(clients))
	for i, c := range clients {
		pools[i] = redsyncgoredis.NewPool(c)
	}
	return &redsyncC{rs: redsync.New(pools...), opts: append(opts, redsync.WithExpiry(TTL))}
}

// A redsync Mutex holds one acquisition's value and is not safe for
// concurrent use, so each acquisition makes its own, as redsync's README
// does.
func (c *redsyncC) Acquire(ctx context.Context, key string, wait bool) (Held, error) {
	m := c.rs.NewMutex(key, c.opts...)
	var err error
	if wait {
		err = m.LockContext(ctx)
	} else {
		err = m.TryLockContext(ctx)
	}
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return nil, busy{err}
	}
	if err != nil {
		return nil, err
	}
	return redsyncHeld{m}, nil
}

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

func (h redsyncHeld) Extend(ctx context.Context) error {
	ok, err := h.m.ExtendContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: extend failed")
	}
	return err
}

// ---- redislock ----

type redislockC struct{ c *redislock.Client }

// redislockWait is redislock's wait: a 1 ms linear backoff, bounded by ctx
// (or by the TTL, redislock's own bound when ctx has no deadline).
var redislockWait = &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}

func (c *redislockC) Acquire(ctx context.Context, key string, wait bool) (Held, error) {
	var opt *redislock.Options
	if wait {
		opt = redislockWait
	}
	l, err := c.c.Obtain(ctx, key, TTL, opt)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, busy{err}
	}
	if err != nil {
		return nil, err
	}
	return redislockHeld{l}, nil
}

type redislockHeld struct{ l *redislock.Lock }

func (h redislockHeld) Unlock(ctx context.Context) error { return h.l.Release(ctx) }
func (h redislockHeld) Extend(ctx context.Context) error { return h.l.Refresh(ctx, TTL, nil) }

// ---- raw floor ----

// raw is the least any Redis lock has to do: one SET NX PX per node and one
// compare-and-delete (a script loaded once per node, run by EVALSHA) per
// node, fanned out concurrently, nothing else: no validity arithmetic, no
// error detail, no options. No library can beat it on latency; it is the
// floor the others are compared with.
type raw struct {
	clients []*redis.Client
	quorum  int
	delSHA  string
	extSHA  string
}

const (
	rawDel = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	rawExt = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
)

func newRaw(clients []*redis.Client) (*raw, error) {
	r := &raw{clients: clients, quorum: len(clients)/2 + 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range clients {
		var err error
		if r.delSHA, err = c.ScriptLoad(ctx, rawDel).Result(); err != nil {
			return nil, fmt.Errorf("bench: loading the raw release script on %s: %w", c.Options().Addr, err)
		}
		if r.extSHA, err = c.ScriptLoad(ctx, rawExt).Result(); err != nil {
			return nil, fmt.Errorf("bench: loading the raw extend script on %s: %w", c.Options().Addr, err)
		}
	}
	return r, nil
}

// each runs f on every node concurrently (the caller takes node 0) and
// counts the nodes where it returned true.
func (r *raw) each(f func(c *redis.Client) bool) int {
	if len(r.clients) == 1 {
		if f(r.clients[0]) {
			return 1
		}
		return 0
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, c := range r.clients[1:] {
		wg.Go(func() {
			if f(c) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	ok := f(r.clients[0])
	wg.Wait()
	if ok {
		n++
	}
	return n
}

func (r *raw) Acquire(ctx context.Context, key string, wait bool) (Held, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := &rawHeld{r: r, key: key, token: hex.EncodeToString(b[:])}
	for {
		n := r.each(func(c *redis.Client) bool { return c.SetNX(ctx, key, h.token, TTL).Val() })
		if n >= r.quorum {
			return h, nil
		}
		if n > 0 {
			_ = h.Unlock(ctx) // roll back the minority that said yes
		}
		if !wait {
			return nil, ErrBusy
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

type rawHeld struct {
	r          *raw
	key, token string
}

func (h *rawHeld) Unlock(ctx context.Context) error {
	keys := []string{h.key}
	if h.r.each(func(c *redis.Client) bool {
		n, _ := c.EvalSha(ctx, h.r.delSHA, keys, h.token).Int()
		return n == 1
	}) < h.r.quorum {
		return errors.New("raw: release failed")
	}
	return nil
}

func (h *rawHeld) Extend(ctx context.Context) error {
	keys := []string{h.key}
	if h.r.each(func(c *redis.Client) bool {
		n, _ := c.EvalSha(ctx, h.r.extSHA, keys, h.token, TTL.Milliseconds()).Int()
		return n == 1
	}) < h.r.quorum {
		return errors.New("raw: extend failed")
	}
	return nil
}

// ---- ideal hand-off (no lock: the physical limit) ----

// ideal is not a lock: it measures how fast this machine can hand one key
// from one worker to the next at all. Its workers take turns round-robin
// (perfectly fair, so nobody ever waits on a retry timer or loses a race):
// a worker's Unlock runs one round, on every node concurrently one
// script that sets the key to the next worker's token (PX TTL) and
// PUBLISHes that token on the next worker's channel, and the next
// worker's Acquire returns as soon as a quorum of those messages has
// reached it over the subscription it opened up front on every node. No
// ownership check, no validity arithmetic, no rollback, no deadline per
// node: one round per hand-off plus the wake-up of the next worker is
// everything it pays, which is the least any hand-off over these nodes
// can pay. The turn number is the token, so a worker knows which grant it
// waits for and ignores the late minority of an earlier one.
//
// As a Contender (the hand-off benchmarks' lu-p50 and solo rounds) it is
// the raw floor: SET NX PX and compare-and-delete. The hand-off itself
// runs on the views Worker returns, one per worker (see [Rotator]).
//
// Queued (ideal-queued), a worker's Acquire first registers its turn with
// every node (one ZADD to a queue key per node, concurrently), and the
// pass also removes the turn it grants from the queue: what a hand-off
// costs at least when the nodes must learn who waits, as they must for
// a fair lock whose waiters come and go (redlock's queue: one script per
// node and waiting call, besides the release's). The rotation still
// decides who is next; the queue is written and never read.
type ideal struct {
	*raw
	queued  bool
	passSHA string
}

// idealPass sets KEYS[1] to ARGV[1] for ARGV[2] ms and publishes ARGV[1]
// on channel ARGV[3]; queued, it first removes ARGV[1] from the queue
// KEYS[2].
const (
	idealPass       = `redis.call("set", KEYS[1], ARGV[1], "px", ARGV[2]) return redis.call("publish", ARGV[3], ARGV[1])`
	idealPassQueued = `redis.call("zrem", KEYS[2], ARGV[1]) ` + idealPass
)

func idealQueue(key string) string { return key + ":ideal:queue" }

func newIdeal(clients []*redis.Client, queued bool) (*ideal, error) {
	r, err := newRaw(clients)
	if err != nil {
		return nil, err
	}
	c := &ideal{raw: r, queued: queued}
	pass := idealPass
	if queued {
		pass = idealPassQueued
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, cl := range clients {
		if c.passSHA, err = cl.ScriptLoad(ctx, pass).Result(); err != nil {
			return nil, fmt.Errorf("bench: loading the ideal hand-off script on %s: %w", cl.Options().Addr, err)
		}
	}
	return c, nil
}

// A Rotator is a contender whose hand-off follows a fixed rotation: the
// hand-off benchmarks give worker i of n its own view, and since worker i
// takes turns i, i+n, i+2n..., each worker must make exactly its share of
// the acquisitions ([rotationShare]), or the worker whose turn it is never
// asks and the others wait for ever.
type Rotator interface {
	// Worker subscribes worker i of n to its grants of key on every node
	// and returns when the subscriptions are confirmed, so that no grant
	// can be published before its worker listens.
	Worker(ctx context.Context, key string, i, n int) (RotationWorker, error)
}

// A RotationWorker is one worker's view of a Rotator. Close ends its
// subscriptions and deletes the key if it still holds the grant that the
// last Unlock published to this worker (nobody is left to take it), so
// that the next run on the same key starts free.
type RotationWorker interface {
	Contender
	Close() error
}

// rotationShare is how many of total acquisitions worker i of n makes in
// a rotation starting at worker 0.
func rotationShare(total, i, n int) int {
	if i >= total {
		return 0
	}
	return (total - i + n - 1) / n
}

func idealChannel(key string, i int) string { return key + ":ideal:" + strconv.Itoa(i) }

// idealWorker is worker i of n; its m-th acquisition (from 0) is turn
// i + m*n, whose token is the turn number.
type idealWorker struct {
	c      *ideal
	key    string
	i, n   int
	next   int         // the turn this worker takes next
	grants chan string // tokens published to this worker, from every node
	subs   []*redis.PubSub
	done   chan struct{}  // closed by Close: the readers stop
	wg     sync.WaitGroup // the readers of subs
}

func (c *ideal) Worker(ctx context.Context, key string, i, n int) (RotationWorker, error) {
	w := &idealWorker{c: c, key: key, i: i, n: n, next: i, grants: make(chan string, 4*len(c.clients)), done: make(chan struct{})}
	ch := idealChannel(key, i)
	for _, cl := range c.clients {
		ps := cl.Subscribe(ctx, ch)
		w.subs = append(w.subs, ps)
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			w.Close()
			return nil, fmt.Errorf("bench: ideal worker %d subscribing on %s: %w", i, cl.Options().Addr, err)
		}
	}
	for _, ps := range w.subs {
		w.wg.Go(func() {
			for {
				m, err := ps.ReceiveMessage(context.Background())
				if err != nil {
					return // closed
				}
				select {
				case w.grants <- m.Payload:
				case <-w.done:
					return
				}
			}
		})
	}
	return w, nil
}

// Acquire waits for a quorum of grants of this worker's turn; worker 0's
// first acquisition takes the free key with SET NX instead. wait is
// ignored: a worker's turn comes, or ctx ends.
func (w *idealWorker) Acquire(ctx context.Context, key string, _ bool) (Held, error) {
	if key != w.key {
		return nil, fmt.Errorf("bench: ideal worker of %q asked for %q", w.key, key)
	}
	token := strconv.Itoa(w.next)
	if w.c.queued && w.next != 0 {
		z := redis.Z{Score: float64(w.next), Member: token}
		if w.c.each(func(c *redis.Client) bool { return c.ZAdd(ctx, idealQueue(key), z).Err() == nil }) < w.c.quorum {
			return nil, fmt.Errorf("bench: ideal worker %d registering turn %d: no quorum", w.i, w.next)
		}
	}
	if w.next == 0 {
		if w.c.each(func(c *redis.Client) bool { return c.SetNX(ctx, key, token, TTL).Val() }) < w.c.quorum {
			return nil, errors.New("bench: ideal hand-off: the key is not free at the start")
		}
	} else {
		for got := 0; got < w.c.quorum; {
			select {
			case t := <-w.grants:
				if t == token {
					got++
				}
			case <-ctx.Done():
				return nil, fmt.Errorf("bench: ideal worker %d waiting for turn %d: %w", w.i, w.next, ctx.Err())
			}
		}
	}
	turn := w.next
	w.next += w.n
	return idealHeld{w: w, turn: turn}, nil
}

// Close stops the subscriptions, waits for their readers, and deletes the
// key if it holds this worker's next turn's token (the grant nobody took).
func (w *idealWorker) Close() error {
	var err error
	close(w.done)
	for _, ps := range w.subs {
		err = errors.Join(err, ps.Close())
	}
	w.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	token, keys := strconv.Itoa(w.next), []string{w.key}
	for _, c := range w.c.clients {
		if e := c.EvalSha(ctx, w.c.delSHA, keys, token).Err(); e != nil {
			err = errors.Join(err, fmt.Errorf("bench: ideal worker %d clearing %q: %w", w.i, w.key, e))
		}
		if !w.c.queued {
			continue
		}
		// The run is over (every worker closes at the end): entries a
		// pass missed (registered after their turn came) go too.
		if e := c.Del(ctx, idealQueue(w.key)).Err(); e != nil {
			err = errors.Join(err, fmt.Errorf("bench: ideal worker %d clearing the queue of %q: %w", w.i, w.key, e))
		}
	}
	return err
}

type idealHeld struct {
	w    *idealWorker
	turn int
}

// Unlock passes the key to the next worker in one round.
func (h idealHeld) Unlock(ctx context.Context) error {
	w := h.w
	next := h.turn + 1
	keys := []string{w.key, idealQueue(w.key)}
	token, ch, px := strconv.Itoa(next), idealChannel(w.key, next%w.n), TTL.Milliseconds()
	if w.c.each(func(c *redis.Client) bool {
		return c.EvalSha(ctx, w.c.passSHA, keys, token, px, ch).Err() == nil
	}) < w.c.quorum {
		return errors.New("ideal: pass failed")
	}
	return nil
}

func (h idealHeld) Extend(context.Context) error { return errors.New("ideal: no extend") }
