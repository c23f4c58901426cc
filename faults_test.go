package redlock_test

// Fault scenarios shared by the redis-server process suite (this file) and
// the Docker suite (faults_docker_test.go). Each scenario injects a fault
// while clients contend, records every critical section in an
// exclusion.Checker, and asserts safety (no two holders inside while both
// believed their lock valid) and liveness (what the quorum rule promises:
// locks granted while a majority is up, ErrUnavailable otherwise).
//
// No scenario asserts an absolute duration: waits are conditions polled
// under a generous watchdog, and timing facts are lower bounds (a call
// that waited for a slow node took at least its delay).

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"

	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// faultWatchdog bounds every wait in the fault scenarios. It catches hangs; it is
// not a timing claim.
const faultWatchdog = 60 * time.Second

// faultCluster is five masters a scenario can break: a node index selects
// the master. The Docker and process suites fill it in.
type faultCluster struct {
	addrs []string
	// nodeTimeout is the per-node timeout scenarios use: short, so a dead
	// or paused master costs little, but above one round trip (the Docker
	// suite's go through a forwarder and docker-proxy).
	nodeTimeout time.Duration
	// restartTTL is the lock TTL of the restart scenario: long enough that
	// killing and immediately restarting three masters fits inside it.
	restartTTL time.Duration

	kill   func(t *testing.T, i int) // SIGKILL: the data is lost
	start  func(t *testing.T, i int) // bring a killed master back, empty
	pause  func(t *testing.T, i int) // freeze: connections hang
	resume func(t *testing.T, i int)

	// proxied are the masters' addresses through a forwarder
	// (internal/faultproxy) on 127.0.0.1, and delay sets the delay of
	// the replies of master i through it.
	proxied []string
	delay   func(i int, d time.Duration)
}

func (fc *faultCluster) backends(t *testing.T) []driver.Node {
	bs := make([]driver.Node, len(fc.addrs))
	for i, addr := range fc.addrs {
		bs[i] = node(t, redistest.Client(t, addr))
	}
	return bs
}

func (fc *faultCluster) locker(t *testing.T, bs []driver.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	r, err := redlock.New(bs, append([]redlock.Option{redlock.WithNodeTimeout(fc.nodeTimeout)}, opts...)...)
	require.NoError(t, err)
	return r
}

// faultProcesses runs five redis-server processes, each with a forwarder
// in front for the faults a process cannot have by itself (latency, a cut
// network).
func faultProcesses(t *testing.T) (*faultCluster, []*faultproxy.Proxy) {
	c := redistest.Start(t, 5)
	proxies := make([]*faultproxy.Proxy, len(c.Servers))
	proxied := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		p, err := faultproxy.New(s.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		proxies[i], proxied[i] = p, p.Addr()
	}
	return &faultCluster{
		addrs:       c.Addrs(),
		nodeTimeout: 200 * time.Millisecond,
		restartTTL:  3 * time.Second,
		kill:        func(_ *testing.T, i int) { c.Servers[i].Kill() },
		start:       func(t *testing.T, i int) { require.NoError(t, c.Servers[i].Restart()) },
		pause:       func(_ *testing.T, i int) { c.Servers[i].Pause() },
		resume:      func(_ *testing.T, i int) { c.Servers[i].Resume() },
		proxied:     proxied,
		delay:       func(i int, d time.Duration) { proxies[i].Set(faultproxy.Fault{Kind: faultproxy.Late, ReplyDelay: d}) },
	}, proxies
}

// faultClassify maps a failed Lock to what the checker counts. Unavailability
// wins over the context: a call that ran out of time while too few nodes
// answered is counted as unavailable.
func faultClassify(err error) exclusion.Outcome {
	switch {
	case errors.Is(err, redlock.ErrUnavailable):
		return exclusion.Unavailable
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return exclusion.Deadline
	case errors.Is(err, redlock.ErrNotAcquired):
		return exclusion.Conflict
	}
	return exclusion.Other
}

// faultContention is a set of workers taking turns on one key until stopped.
type faultContention struct {
	chk     *exclusion.Checker
	acq     atomic.Int64 // acquisitions, cheap to poll
	unlocks atomic.Int64 // Unlock errors: ErrNotHeld or ErrUnavailable when a master died under the lock
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// faultContend starts workers that lock key, stay inside for a moment, and
// unlock, recording everything in chk. Each Lock call has its own deadline.
func faultContend(t *testing.T, lk redlock.Locker, chk *exclusion.Checker, key string, workers int, opts ...redlock.Option) *faultContention {
	c := &faultContention{chk: chk, stop: make(chan struct{})}
	opts = append([]redlock.Option{redlock.WithStrategy(redlock.Retry(5, 2*time.Millisecond))}, opts...)
	for w := range workers {
		c.wg.Go(func() {
			for {
				select {
				case <-c.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				l, err := lk.Lock(ctx, key, opts...)
				if err != nil {
					cancel()
					chk.Fail(faultClassify(err), fmt.Errorf("worker %d: %w", w, err))
					time.Sleep(5 * time.Millisecond) // fast failures must not spin
					continue
				}
				e := chk.Enter(key, l.Token(), l.Until())
				c.acq.Add(1)
				time.Sleep(time.Millisecond)
				e.Exit()
				if err := l.Unlock(ctx); err != nil {
					// A lock granted by exactly a quorum cannot confirm
					// its release once one of those masters dies.
					c.unlocks.Add(1)
					if !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrUnavailable) {
						chk.Fail(exclusion.Other, fmt.Errorf("worker %d: Unlock: %w", w, err))
					}
				}
				cancel()
			}
		})
	}
	t.Cleanup(c.Stop) // also when a watchdog ends the test early
	return c
}

// waitAcquisitions waits until n more locks were granted than before.
func (c *faultContention) waitAcquisitions(t *testing.T, n int64, what string) {
	t.Helper()
	target := c.acq.Load() + n
	faultWaitFor(t, what, func() bool { return c.acq.Load() >= target })
}

// Stop stops the workers and waits for them. Later calls do nothing.
func (c *faultContention) Stop() {
	c.stopped.Do(func() { close(c.stop) })
	c.wg.Wait()
}

// faultWaitFor polls cond until it holds; the watchdog fails the test.
func faultWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(faultWatchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("watchdog: %s did not happen within %v", what, faultWatchdog)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// faultKillOneThenTwo kills one master and then a second while clients
// contend: 3 of 5 are still a quorum, so locks keep being granted, nothing
// is ever unavailable, and no two holders overlap.
func faultKillOneThenTwo(t *testing.T, fc *faultCluster) {
	lk := fc.locker(t, fc.backends(t), redlock.WithTTL(2*time.Second))
	chk := exclusion.New()
	c := faultContend(t, lk, chk, "kill-1-2", 4)
	c.waitAcquisitions(t, 20, "acquisitions with 5 of 5 up")
	fc.kill(t, 0)
	c.waitAcquisitions(t, 20, "acquisitions with 4 of 5 up")
	fc.kill(t, 1)
	c.waitAcquisitions(t, 20, "acquisitions with 3 of 5 up")
	c.Stop()
	st := chk.Verify(t, "kill 1 then 2")
	assert.Zero(t, st.Unavailable, "3 of 5 masters always answer")
	t.Logf("Unlock calls that could not confirm a quorum (a master died under them): %d", c.unlocks.Load())
}

// faultKillThree kills a majority: every call ends with ErrUnavailable
// (never ErrNotAcquired: "broken", not "busy") no later than its deadline,
// and leaves no goroutine behind. Restarted, the masters serve again.
func faultKillThree(t *testing.T, fc *faultCluster) {
	bs := fc.backends(t)
	lk := fc.locker(t, bs, redlock.WithTTL(time.Second))
	l, err := lk.Lock(t.Context(), "kill-3") // warm the connection pools
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	for i := range 3 {
		fc.kill(t, i)
	}

	chk := exclusion.New()
	before := goleak.IgnoreCurrent()
	const callers, calls = 4, 3
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for j := range calls {
				// j == 0 fails at once; the others retry until their
				// deadline. Both end with ErrUnavailable.
				strategy, budget := redlock.Reject(), 10*time.Second
				if j > 0 {
					strategy, budget = redlock.Retry(1000, 10*time.Millisecond), 300*time.Millisecond
				}
				deadline := time.Now().Add(budget)
				ctx, cancel := context.WithDeadline(t.Context(), deadline)
				l, err := lk.Lock(ctx, "kill-3", redlock.WithStrategy(strategy))
				expired := ctx.Err() != nil
				cancel()
				if late := time.Since(deadline); late > 5*time.Second { // a watchdog, not a timing claim
					chk.Fail(exclusion.Other, fmt.Errorf("Lock returned %v after its deadline", late))
				}
				if err == nil {
					chk.Enter("kill-3", l.Token(), l.Until()).Exit()
					_ = l.Unlock(t.Context())
					continue
				}
				chk.Fail(faultClassify(err), err)
				switch {
				case !errors.Is(err, redlock.ErrUnavailable):
					chk.Fail(exclusion.Other, fmt.Errorf("want ErrUnavailable: %w", err))
				case !expired && errors.Is(err, redlock.ErrNotAcquired):
					chk.Fail(exclusion.Other, fmt.Errorf("unavailable is not busy: %w", err))
				case j > 0 && !errors.Is(err, context.DeadlineExceeded):
					chk.Fail(exclusion.Other, fmt.Errorf("a retrying call ends at its deadline: %w", err))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(faultWatchdog):
		t.Fatal("watchdog: Lock calls did not return after their deadline")
	}
	st := chk.Verify(t, "kill 3")
	assert.Zero(t, st.Acquisitions, "no lock without a majority")
	assert.Equal(t, callers*calls, st.Unavailable, "every call ended ErrUnavailable")
	// go-redis starts one redial probe per pool whose dials keep failing
	// (pool.tryDial, once a second until the node answers or the client is
	// closed): the client's, not a call's.
	goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))

	for i := range 3 {
		fc.start(t, i)
	}
	// The first calls may still fail fast: go-redis keeps returning the
	// last dial error until its redial probe (once a second) sees the node
	// back. Service resumes once one call succeeds; from then on a quorum
	// answers.
	faultWaitFor(t, "a lock after the masters came back", func() bool {
		l, err := lk.Lock(t.Context(), "kill-3")
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			return false
		}
		return l.Unlock(t.Context()) == nil
	})
	chk = exclusion.New()
	c := faultContend(t, lk, chk, "kill-3", 4)
	c.waitAcquisitions(t, 20, "acquisitions after the masters came back")
	c.Stop()
	st = chk.Verify(t, "kill 3, restarted")
	// With all five back, a call can still miss its quorum when a loaded
	// machine (-race, other suites beside it) lets node calls run past
	// the node timeout; that must stay the exception, not the rule.
	assert.Less(t, st.Unavailable*4, st.Acquisitions, "all five masters are back: unavailable is the exception")
}

// pauseOnAcquire is a fake node's hook that holds the first Acquire of
// key until the test has frozen that node, then sends it: the freeze lands
// in the middle of the acquisition, with the other nodes' SETs in flight.
type pauseOnAcquire struct {
	key     string
	arrived chan struct{} // closed when the Acquire arrived
	paused  chan struct{} // closed by the test once the node is frozen
	once    sync.Once
	sent    atomic.Bool // the SET really went to the frozen node
}

func (p *pauseOnAcquire) hook(ctx context.Context, c fakenode.Call) fakenode.Result {
	first := false
	if c.Op == fakenode.Acquire && c.Key == p.key {
		p.once.Do(func() { first = true })
	}
	if first {
		close(p.arrived)
		select {
		case <-p.paused:
		case <-ctx.Done():
			return fakenode.Result{Err: ctx.Err()}
		}
		p.sent.Store(true)
	}
	return c.Send(ctx)
}

// faultPauseMidAcquisition freezes a master while an acquisition is in
// flight: the per-node timeout bounds the call, the other four grant the
// lock, and clients keep taking turns while the master stays frozen.
func faultPauseMidAcquisition(t *testing.T, fc *faultCluster) {
	const key = "pause"
	bs := fc.backends(t)
	p := &pauseOnAcquire{key: key, arrived: make(chan struct{}), paused: make(chan struct{})}
	n := fakenode.Wrap(bs[0])
	n.SetHook(p.hook)
	bs[0] = fakenode.Silent(n)
	// The node timeout must cover freezing the node (docker pause is not
	// instant) for the SET to reach it frozen, and stay far below the TTL.
	lk := fc.locker(t, bs, redlock.WithTTL(10*time.Second), redlock.WithNodeTimeout(time.Second), redlock.WithStrategy(redlock.Reject()))

	type result struct {
		l   *redlock.Lock
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, err := lk.Lock(t.Context(), key)
		res <- result{l, err}
	}()
	select {
	case <-p.arrived:
	case <-time.After(faultWatchdog):
		t.Fatal("watchdog: the acquisition never reached node 0")
	}
	fc.pause(t, 0)
	close(p.paused)
	defer fc.resume(t, 0)

	var r result
	select {
	case r = <-res:
	case <-time.After(faultWatchdog):
		t.Fatal("watchdog: Lock did not return while a master was frozen")
	}
	require.NoError(t, r.err, "four of five masters granted it")
	assert.True(t, p.sent.Load(), "the SET was sent to the frozen master")
	for i, addr := range fc.addrs[1:] {
		v, err := redistest.Client(t, addr).Get(t.Context(), key).Result()
		require.NoError(t, err)
		assert.Equal(t, r.l.Token(), v, "node %d holds our token", i+1)
	}

	chk := exclusion.New()
	e := chk.Enter(key, r.l.Token(), r.l.Until())
	_, err := lk.Lock(t.Context(), key)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "the lock still excludes while a master is frozen")
	e.Exit()
	require.NoError(t, r.l.Unlock(t.Context()))

	// Contenders use the short default node timeout: each round waits
	// that long for the frozen master, and no longer.
	c := faultContend(t, fc.locker(t, bs, redlock.WithTTL(2*time.Second)), chk, key, 3)
	c.waitAcquisitions(t, 6, "acquisitions with a frozen master")
	c.Stop()
	st := chk.Verify(t, "pause mid-acquisition")
	assert.Zero(t, st.Unavailable)
}

// faultRestartWithoutPersistence kills a majority of masters while a lock
// is held and restarts them empty, either at once (breaking the documented
// rule) or after the TTL (following it). A second client tries all along.
// It returns the checker (A's section and B's) and B's acquisition time;
// the caller asserts what each variant must show.
func faultRestartWithoutPersistence(t *testing.T, fc *faultCluster, delayed bool) (*exclusion.Checker, *redlock.Lock, *redlock.Lock) {
	const key = "restart"
	ttl := fc.restartTTL
	bs := fc.backends(t)
	lk := fc.locker(t, bs, redlock.WithTTL(ttl), redlock.WithStrategy(redlock.Reject()))
	chk := exclusion.New()

	a, err := lk.Lock(t.Context(), key)
	require.NoError(t, err)
	aIn := chk.Enter(key, "A", a.Until())
	crash := time.Now()
	for i := range 3 {
		fc.kill(t, i)
	}
	if !delayed {
		// Back at once, before B tries: B's attempts into masters that are
		// down or coming up can leave a late SET there (the forwarder
		// delivers it after B gave up and rolled back), a key nobody holds
		// that blocks B for its TTL (attempt.go's rollback) and would hide
		// the overlap this scenario shows.
		for i := range 3 {
			fc.start(t, i)
		}
	}

	// B tries every few milliseconds until it gets the lock (with the rule
	// kept, from the crash on).
	bDone := make(chan *redlock.Lock, 1)
	stop := make(chan struct{})
	go func() {
		defer close(bDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			b, err := lk.Lock(ctx, key)
			cancel()
			if err == nil {
				chk.Enter(key, "B", b.Until()).Exit()
				bDone <- b
				return
			}
			chk.Fail(faultClassify(err), err)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { close(stop); <-bDone }()

	if delayed {
		time.Sleep(time.Until(crash.Add(ttl))) // the rule: out for at least the TTL
		for i := range 3 {
			fc.start(t, i)
		}
	}
	var b *redlock.Lock
	select {
	case b = <-bDone:
	case <-time.After(faultWatchdog):
		t.Fatal("watchdog: B never got the lock after the restart")
	}
	require.NotNil(t, b, "B got the lock once the masters were back")
	t.Logf("crash to B's lock: %v; A's validity ran %v past the crash", time.Since(crash).Round(time.Millisecond), a.Until().Sub(crash).Round(time.Millisecond))
	// A works until its validity ends, then leaves.
	time.Sleep(time.Until(a.Until()))
	aIn.Exit()
	_ = a.Unlock(t.Context())
	_ = b.Unlock(t.Context())
	return chk, a, b
}

func faultRestartDelayed(t *testing.T, fc *faultCluster) {
	chk, a, b := faultRestartWithoutPersistence(t, fc, true)
	st := chk.Verify(t, "restart after the TTL (rule kept)")
	assert.Zero(t, st.Overlaps)
	assert.Positive(t, st.Unavailable, "three masters were down for a TTL")
	first := chk.Sections()[1]
	assert.False(t, first.Start.Before(a.Until()), "B entered only after A's validity (B until %v)", b.Until())
}

func faultRestartImmediate(t *testing.T, fc *faultCluster) {
	chk, a, _ := faultRestartWithoutPersistence(t, fc, false)
	st := chk.Report(t, "immediate restart (rule broken, overlap expected)")
	ss := chk.Sections()
	require.Len(t, ss, 2)
	assert.True(t, ss[1].Start.Before(a.Until()), "B got in while A was still valid")
	assert.Positive(t, st.Overlaps, "the checker sees the two holders overlap")
}

// faultNetworkCut holds a lock while one master is cut off, keeps it alive
// with Extend on the other four (so the cut master's copy goes stale and
// expires), reconnects the master and keeps holding. A second client tries
// all along: the stale master must never let it in while the first holder
// is valid. cut/heal select the flavour: a cut (docker network disconnect,
// or the forwarder's Cut: connections closed and refused, calls fail fast)
// or a partition (an iptables DROP, or the forwarder's Hold: packets
// vanish, calls hang until the node timeout, and what was sent may still
// arrive after the heal).
func faultNetworkCut(t *testing.T, fc *faultCluster, what string, cut, heal func(testing.TB)) {
	const key = "cut"
	const ttl = 2 * time.Second
	bs := fc.backends(t)
	lk := fc.locker(t, bs, redlock.WithTTL(ttl), redlock.WithStrategy(redlock.Reject()))
	chk := exclusion.New()

	a, err := lk.Lock(t.Context(), key)
	require.NoError(t, err)
	aStart := time.Now()
	aIn := chk.Enter(key, "A", a.Until())
	cut(t)

	// B tries every few milliseconds until told to stop.
	stop := make(chan struct{})
	bGot := make(chan *redlock.Lock, 1)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := lk.Lock(t.Context(), key)
			if err != nil {
				chk.Fail(faultClassify(err), err)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			chk.Enter(key, "B", b.Until()).Exit()
			_ = b.Unlock(t.Context())
			select {
			case bGot <- b:
			default:
			}
		}
	}()
	stopB := sync.OnceFunc(func() { close(stop); <-bDone })
	defer stopB()

	// A keeps its lock alive on the four reachable masters until the cut
	// master's copy (set with the first TTL) has surely expired.
	hold := func(until time.Time) {
		for time.Now().Before(until) {
			time.Sleep(ttl / 4)
			require.NoError(t, a.Extend(t.Context(), ttl), "four of five masters extend")
			aIn.Extend(a.Until())
		}
	}
	hold(aStart.Add(ttl + ttl/2))
	heal(t)
	v, err := redistest.Client(t, fc.addrs[0]).Get(t.Context(), key).Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
	}
	assert.NotEqual(t, a.Token(), v, "the cut master's copy of A's key expired: it is stale")
	hold(time.Now().Add(ttl))
	select {
	case <-bGot:
		t.Fatal("B got the lock while A held it")
	default:
	}
	aIn.Exit()
	require.NoError(t, a.Unlock(t.Context()))
	select {
	case <-bGot:
	case <-time.After(faultWatchdog):
		t.Fatal("watchdog: B never got the lock after A released it")
	}
	stopB()

	st := chk.Verify(t, what+" during a hold")
	assert.Positive(t, st.Conflicts, "B was refused while A held the lock")
	// Four masters always answer, so B is refused, not left without a
	// quorum; but a loaded machine (-race, other suites beside it) can
	// push a second node's call past the node timeout now and then
	// (seen once in 2 x 98 attempts): unavailable is the exception.
	assert.Less(t, st.Unavailable*10, st.Conflicts, "four masters always answered: unavailable is the exception")
}

// faultLatency slows masters down through their forwarders. A slow master
// shrinks the validity by the time the round waited for it; a majority
// slower than the validity (or than the TTL) refuses the lock and the keys
// are rolled back on every master.
func faultLatency(t *testing.T, fc *faultCluster) {
	const key = "latency"
	// Every client goes through the forwarder, with or without latency, so
	// the baseline and the slow case take the same path.
	bs := make([]driver.Node, len(fc.proxied))
	for i, addr := range fc.proxied {
		bs[i] = node(t, redistest.Client(t, addr))
	}
	direct := make([]*redis.Client, len(fc.addrs)) // no forwarder, no latency
	for i, addr := range fc.addrs {
		direct[i] = redistest.Client(t, addr)
	}
	keysLeft := func() int {
		n := 0
		for _, d := range direct {
			if d.Exists(t.Context(), key).Val() > 0 {
				n++
			}
		}
		return n
	}

	// Validity left when Lock returns, and how long the call took.
	const ttl, slow = 2 * time.Second, 300 * time.Millisecond
	lk := fc.locker(t, bs, redlock.WithTTL(ttl), redlock.WithNodeTimeout(time.Second), redlock.WithStrategy(redlock.Reject()))
	drift := redlock.DriftFor(ttl, redlock.DefaultDriftFactor)
	measure := func() (left, took time.Duration) {
		t.Helper()
		start := time.Now()
		l, err := lk.Lock(t.Context(), key)
		end := time.Now()
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		// The round started inside [start, end], and Until counts from it.
		assert.False(t, l.Until().Before(start.Add(ttl-drift)), "Until is TTL - drift after the round's start")
		assert.False(t, l.Until().After(end.Add(ttl-drift)), "Until is TTL - drift after the round's start")
		return l.Until().Sub(end), end.Sub(start)
	}
	base, _ := measure()
	fc.delay(0, slow)
	left, took := measure()
	t.Logf("validity left: %v without latency, %v with %v on one master (call took %v)", base, left, slow, took)
	assert.GreaterOrEqual(t, took, slow, "the round waited for the slow master")
	assert.LessOrEqual(t, left, ttl-drift-slow, "validity shrank by at least the latency")
	assert.Less(t, left, base, "less validity than without latency")

	chk := exclusion.New()
	w := faultContend(t, fc.locker(t, bs, redlock.WithTTL(ttl), redlock.WithNodeTimeout(time.Second)), chk, key, 3)
	w.waitAcquisitions(t, 6, "acquisitions with a slow master")
	w.Stop()
	st := chk.Verify(t, "latency on one master")
	assert.Zero(t, st.Unavailable)

	// A majority that answers yes later than the validity cannot happen in
	// one round: a configuration whose node timeout reaches past the
	// validity (TTL 1 s, drift factor 0.5 leaves 498 ms; node timeout
	// 950 ms) is refused. drift_test.go shows a round that took too long
	// on a fake clock being rolled back.
	_, err := lk.Lock(t.Context(), key, redlock.WithTTL(time.Second), redlock.WithDriftFactor(0.5), redlock.WithNodeTimeout(950*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrInvalid, "a node timeout longer than the validity is refused")

	// Slower than the TTL itself: the node timeout (below the TTL) cuts the
	// slow majority off, the call fails as unavailable and the SETs that
	// did land are rolled back.
	for i := range 3 {
		fc.delay(i, 1500*time.Millisecond)
	}
	_, err = lk.Lock(t.Context(), key, redlock.WithTTL(time.Second), redlock.WithNodeTimeout(950*time.Millisecond))
	require.ErrorIs(t, err, redlock.ErrUnavailable, "a majority did not answer within the node timeout")
	assert.Zero(t, keysLeft(), "rolled back on every master, the slow ones included")

	for i := range 3 {
		fc.delay(i, 0)
	}
	l, err := lk.Lock(t.Context(), key)
	require.NoError(t, err, "service resumes without the latency")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestFaults runs the fault scenarios on redis-server processes: SIGKILL,
// SIGSTOP and restart without persistence, plus a cut network, a partition
// and latency through forwarders; no Docker needed.
func TestFaults(t *testing.T) {
	// A network cut on processes: clients reach the masters through
	// forwarders only, and the forwarder of master 0 cuts (connections
	// closed and refused, as with docker network disconnect) or stalls
	// (packets vanish and are delivered late, as with an iptables DROP).
	viaProxies := func(t *testing.T, what string, cut faultproxy.Kind) {
		fc, proxies := faultProcesses(t)
		through := *fc
		through.addrs = fc.proxied
		faultNetworkCut(t, &through, what,
			func(testing.TB) { proxies[0].Set(faultproxy.Fault{Kind: cut}) },
			func(testing.TB) { proxies[0].Set(faultproxy.Fault{}) })
	}
	scenarios := []struct {
		name string
		run  func(*testing.T)
	}{
		{"KillOneThenTwo", func(t *testing.T) { fc, _ := faultProcesses(t); faultKillOneThenTwo(t, fc) }},
		{"KillThree", func(t *testing.T) { fc, _ := faultProcesses(t); faultKillThree(t, fc) }},
		{"PauseMidAcquisition", func(t *testing.T) { fc, _ := faultProcesses(t); faultPauseMidAcquisition(t, fc) }},
		{"RestartDelayed", func(t *testing.T) { fc, _ := faultProcesses(t); faultRestartDelayed(t, fc) }},
		{"RestartImmediate", func(t *testing.T) { fc, _ := faultProcesses(t); faultRestartImmediate(t, fc) }},
		{"NetworkCut", func(t *testing.T) { viaProxies(t, "network cut (forwarder cut)", faultproxy.Cut) }},
		{"NetworkPartition", func(t *testing.T) { viaProxies(t, "partition (forwarder stall)", faultproxy.Stall) }},
		{"Latency", func(t *testing.T) { fc, _ := faultProcesses(t); faultLatency(t, fc) }},
	}
	for _, s := range scenarios {
		t.Run(s.name, s.run)
	}
}
