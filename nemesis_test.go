package redlock_test

// The network nemesis: real redis-server processes behind fault proxies
// (internal/faultproxy) that deliver commands late (after their client
// gave up), lose replies after the command ran, or stall, on a minority
// of the nodes at a time. Lockers standing for separate processes contend
// for two keys through the proxies, and three checks judge the library:
//
//   - mutual exclusion: no two holders' validity intervals overlap on a
//     key (internal/exclusion);
//   - fencing: a fenced holder that acquired after another fenced
//     holder's section ended has a strictly greater token;
//   - the quorum watch: while a holder is inside its section, with
//     validity left, a quorum of the nodes, read directly (bypassing the
//     proxies), still holds its token.
//
// TestNemesis is the seeded random schedule (REDLOCK_NEMESIS_SEED replays
// a seed, REDLOCK_NEMESIS_DURATION sets the length); the targeted tests
// script one fault sequence that a random schedule hits only rarely.

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"

	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	// NemesisSeedEnv replays a seed; NemesisDurationEnv sets how long the
	// random nemesis runs (a Go duration, e.g. 30m).
	nemesisSeedEnv     = "REDLOCK_NEMESIS_SEED"
	nemesisDurationEnv = "REDLOCK_NEMESIS_DURATION"
)

// nemesisNodes are masters behind fault proxies: clients of the lockers
// go through the proxies, the quorum watch reads the masters directly.
type nemesisNodes struct {
	proxies []*faultproxy.Proxy
	direct  []*redis.Client
}

// nemesisProxies puts a fault proxy in front of every address.
func nemesisProxies(t *testing.T, addrs []string) *nemesisNodes {
	n := &nemesisNodes{}
	for _, addr := range addrs {
		p, err := faultproxy.New(addr)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		n.proxies = append(n.proxies, p)
		n.direct = append(n.direct, redistest.Client(t, addr))
	}
	return n
}

// setAll puts every node's proxy on f.
func (n *nemesisNodes) setAll(f faultproxy.Fault) {
	for _, p := range n.proxies {
		p.Set(f)
	}
}

// locker is one process's Redlock over the proxies: its own go-redis
// clients (maxRetries as go-redis reads it: 0 is its default of 3 resends,
// -1 none) and its own hand-off lines. Each client starts with two
// initialised connections, as a busy process's pool has: go-redis
// initialises a connection (HELLO) on its first use, and a command whose
// connection is dialled while its path delivers late never leaves the
// client at all.
func (n *nemesisNodes) locker(t *testing.T, name string, maxRetries int, opts ...redlock.Option) *redlock.Redlock {
	bs := make([]driver.Node, len(n.proxies))
	var wg sync.WaitGroup
	for i, p := range n.proxies {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true,
			MaxRetries: maxRetries, DialTimeout: time.Second})
		t.Cleanup(func() { c.Close() })
		for range 2 {
			wg.Go(func() { _ = c.Do(t.Context(), "blpop", "redlock-nemesis-warm", "0.05").Err() })
		}
		bs[i] = node(t, c)
	}
	wg.Wait()
	r, err := redlock.New(bs, opts...)
	require.NoError(t, err)
	return r
}

// probe reads key on every node directly and reports how many nodes
// answered with token and how many answered with something else (absent
// or another holder's token); nodes that did not answer count in neither.
// states shows each node's answer: "T" (token), "-" (absent), "o" (another
// token), "?" (no answer).
func (n *nemesisNodes) probe(ctx context.Context, key, token string) (holding, gone int, states string) {
	b := make([]byte, 0, len(n.direct))
	for _, d := range n.direct {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		v, err := d.Get(ctx, key).Result()
		cancel()
		switch {
		case err == nil && v == token:
			holding++
			b = append(b, 'T')
		case err == nil:
			gone++
			b = append(b, 'o')
		case errors.Is(err, redis.Nil):
			gone++
			b = append(b, '-')
		default:
			b = append(b, '?')
		}
	}
	return holding, gone, string(b)
}

// quorumWatch counts probes of holders' keys. A granted node keeps the
// holder's key at least until the round's start plus the TTL on the
// node's clock, which is later than Until (the drift allowance covers the
// clocks and Redis's millisecond expiry), and only the holder's token can
// delete it. So while a holder is inside its section (before Unlock
// started) and a probe ended before Until, more nodes than a minority
// answering without the token means a node that granted the lock lost it
// early: a violation. The same probe ending after Until is a benign race
// with expiry and is only counted.
type quorumWatch struct {
	probes, violations, late atomic.Int64
	// dropped counts nodes seen holding a holder's token that later, in
	// the same section and with validity left, did not: informational.
	// Once every attempt has its own token, only the granted attempt's SET
	// carries the token and nothing but Unlock deletes it, so this too
	// should stay 0; with one token for all of a call's attempts it also
	// counts an earlier attempt's late SET deleted by that attempt's late
	// rollback on a node the grant did not count (harmless by itself).
	dropped atomic.Int64
	mu      sync.Mutex
	first   []string    // descriptions of the first violations
	firstAt []time.Time // and when they were seen
}

// check probes key for holder and records the outcome. seen marks the
// nodes seen holding the token so far in this section.
func (w *quorumWatch) check(ctx context.Context, n *nemesisNodes, key, holder, token string, until time.Time, seen []bool) {
	holding, gone, states := n.probe(ctx, key, token)
	end := time.Now()
	w.probes.Add(1)
	for i := range seen {
		switch {
		case states[i] == 'T':
			seen[i] = true
		case seen[i] && states[i] != '?' && end.Before(until):
			w.dropped.Add(1)
			seen[i] = false
		}
	}
	if gone <= len(n.direct)-redlock.Quorum(len(n.direct)) {
		return
	}
	if !end.Before(until) {
		w.late.Add(1)
		return
	}
	w.violations.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.first) < 3 {
		w.firstAt = append(w.firstAt, end)
		w.first = append(w.first, fmt.Sprintf("key %q: %s's token on %d of %d nodes (%d without it: %s) with %v of validity left, at %s",
			key, holder, holding, len(n.direct), gone, states, until.Sub(end).Round(time.Millisecond), end.Format("15:04:05.000")))
	}
}

// verify reports the counts and fails t for every violation.
func (w *quorumWatch) verify(t *testing.T) {
	t.Helper()
	t.Logf("quorum watch: %d probes, %d with fewer than a quorum holding the token while validity was left, %d such probes ending after Until (benign); nodes that dropped a token they were seen holding, validity left: %d",
		w.probes.Load(), w.violations.Load(), w.late.Load(), w.dropped.Load())
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.first {
		t.Errorf("quorum watch: a holder's key vanished from a quorum while it held the lock: %s", v)
	}
	if n := w.violations.Load(); n > int64(len(w.first)) {
		t.Errorf("quorum watch: ... and %d more such probes", n-int64(len(w.first)))
	}
}

// hold stays in a critical section until end, probing the key every few
// milliseconds.
func (w *quorumWatch) hold(ctx context.Context, n *nemesisNodes, l *redlock.Lock, holder string, end time.Time, every time.Duration) {
	keys := l.Keys()
	seen := make([][]bool, len(keys)) // per key of a set
	for i := range seen {
		seen[i] = make([]bool, len(n.direct))
	}
	for {
		for i, key := range keys {
			w.check(ctx, n, key, holder, l.Token(), l.Until(), seen[i])
		}
		left := time.Until(end)
		if left <= 0 || ctx.Err() != nil {
			return
		}
		time.Sleep(min(left, every))
	}
}

// fenceRecords are fenced holders' tokens, by holder name and key (a set
// has one per key).
type fenceRecords struct {
	mu     sync.Mutex
	tokens map[[2]string]int64
}

func (f *fenceRecords) add(holder string, l *redlock.Lock) {
	for i, k := range l.Keys() {
		f.addFence(holder, k, l.Fences()[i])
	}
}

// addFence records one fence of holder on key (an election's term).
func (f *fenceRecords) addFence(holder, key string, fence int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tokens == nil {
		f.tokens = map[[2]string]int64{}
	}
	f.tokens[[2]string{holder, key}] = fence
}

// verify checks, per key, that every fenced holder whose Lock returned
// after another fenced holder's section had ended (left, or validity over)
// got a strictly greater token. It returns how many ordered pairs were
// implied (each section against the greatest earlier token).
func (f *fenceRecords) verify(t *testing.T, sections []exclusion.Section) int {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	byKey := map[string][]exclusion.Section{}
	for _, s := range sections {
		for _, k := range s.Held() {
			if _, ok := f.tokens[[2]string{s.Holder, k}]; ok {
				byKey[k] = append(byKey[k], s)
			}
		}
	}
	checked, bad := 0, 0
	for key, ss := range byKey {
		ends := slices.Clone(ss)
		slices.SortFunc(ends, func(a, b exclusion.Section) int { return a.ValidEnd().Compare(b.ValidEnd()) })
		slices.SortFunc(ss, func(a, b exclusion.Section) int { return a.Start.Compare(b.Start) })
		// The two greatest tokens among sections ended so far, of
		// different holders: a section whose Lock returned after its own
		// Until (see lateGrants) has ended before it started, and is not
		// compared with itself.
		var top [2]exclusion.Section
		var topFence [2]int64
		j := 0
		for _, s := range ss {
			for ; j < len(ends) && ends[j].ValidEnd().Before(s.Start); j++ {
				switch fe := f.tokens[[2]string{ends[j].Holder, key}]; {
				case fe > topFence[0]:
					top[1], topFence[1] = top[0], topFence[0]
					top[0], topFence[0] = ends[j], fe
				case fe > topFence[1]:
					top[1], topFence[1] = ends[j], fe
				}
			}
			best, bestFence := top[0], topFence[0]
			if best.Holder == s.Holder {
				best, bestFence = top[1], topFence[1]
			}
			if bestFence == 0 {
				continue
			}
			checked++
			if fe := f.tokens[[2]string{s.Holder, key}]; fe <= bestFence {
				bad++
				if bad <= 10 {
					t.Errorf("fencing: key %q: %s got token %d at %v, after %s (token %d) had ended at %v",
						key, s.Holder, fe, s.Start.Format("15:04:05.000"), best.Holder, bestFence, best.ValidEnd().Format("15:04:05.000"))
				}
			}
		}
	}
	return checked
}

// TestNemesisTargetedLateRelease scripts the safety review's late
// release through the proxies: N=3, a Lock call's first attempt times
// out on two slow nodes, whose SET and rollback release are delivered
// late, after the client gave up; the network heals as soon as that attempt failed, so the
// second attempt is granted by all three at once. The late commands land
// later, while the holder is still valid. A second client tries all
// along. Whatever the library does about it, the holder's key must stay
// on a quorum while its validity lasts and no one else may get the lock.
func TestNemesisTargetedLateRelease(t *testing.T) {
	nemesisTargetedLateRelease(t, redistest.Start(t, 3).Addrs())
}

// nemesisTargetedLateRelease runs the scripted sequence on three masters.
func nemesisTargetedLateRelease(t *testing.T, addrs []string) {
	require.Len(t, addrs, 3)
	nodes := nemesisProxies(t, addrs)
	const (
		key         = "nemesis-targeted"
		ttl         = 3 * time.Second
		nodeTimeout = 50 * time.Millisecond
		late        = time.Second // well after attempt 2, well inside the validity
	)
	var heal sync.Once
	healOnFailure := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			heal.Do(func() { nodes.setAll(faultproxy.Fault{}) })
		}
	})
	a := nodes.locker(t, "A", -1, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout),
		redlock.WithStrategy(redlock.Retry(3, 100*time.Millisecond)), redlock.WithObserver(healOnFailure))
	b := nodes.locker(t, "B", -1, redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout), redlock.WithStrategy(redlock.Reject()))

	// Steady state first: a late EVALSHA runs only on a node that already
	// knows the script (NOSCRIPT otherwise, and its client is gone to
	// fall back to EVAL); any earlier release on the node loads it.
	warm, err := a.Lock(t.Context(), key+"-warm", redlock.WithObserver(nil))
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(t.Context()))

	for _, i := range []int{1, 2} {
		nodes.proxies[i].Set(faultproxy.Fault{Kind: faultproxy.Late, Delay: late})
	}
	chk := exclusion.New()
	var watch quorumWatch
	la, err := a.Lock(t.Context(), key)
	require.NoError(t, err, "A gets the lock once the network healed")
	aIn := chk.Enter(key, "A", la.Until())

	// B tries every few milliseconds while A holds.
	stop := make(chan struct{})
	bDone := make(chan struct{})
	var bGot atomic.Int64
	go func() {
		defer close(bDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			lb, err := b.Lock(t.Context(), key)
			if err != nil {
				chk.Fail(faultClassify(err), err)
				continue
			}
			bGot.Add(1)
			in := chk.Enter(key, "B", lb.Until())
			time.Sleep(20 * time.Millisecond) // B's work
			in.Exit()
			_ = lb.Unlock(t.Context())
		}
	}()
	// A works until its validity is nearly over, watching its key.
	watch.hold(t.Context(), nodes, la, "A", la.Until().Add(-50*time.Millisecond), 10*time.Millisecond)
	aIn.Exit()
	aErr := la.Unlock(t.Context())
	close(stop)
	<-bDone
	faultWaitFor(t, "the late commands delivered", func() bool {
		return nodes.proxies[1].Pending() == 0 && nodes.proxies[2].Pending() == 0
	})
	for _, i := range []int{1, 2} {
		st := nodes.proxies[i].Stats()
		t.Logf("node %d proxy: %+v", i, st)
		assert.Positive(t, st.AfterClose, "node %d: commands were delivered after their client gave up (the fault happened)", i)
	}
	t.Logf("A: token %s, Unlock: %v; B got the lock %d times while A was inside", la.Token(), aErr, bGot.Load())
	watch.verify(t)
	chk.Verify(t, "late release after a retry")
}

// nemesisSeed returns the seed to use: REDLOCK_NEMESIS_SEED, or a fresh one.
func nemesisSeed(t *testing.T) uint64 {
	if s := os.Getenv(nemesisSeedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s", nemesisSeedEnv)
		return seed
	}
	return rand.Uint64()
}

// nemesisDuration returns how long the random nemesis runs: the
// environment's REDLOCK_NEMESIS_DURATION, else def (or 3 s under -short).
func nemesisDuration(t *testing.T, def time.Duration) time.Duration {
	if s := os.Getenv(nemesisDurationEnv); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "%s", nemesisDurationEnv)
		return d
	}
	if testing.Short() {
		return 3 * time.Second
	}
	return def
}

// nemesisRun is the random nemesis's set-up.
type nemesisRun struct {
	seed        uint64
	duration    time.Duration
	ttl         time.Duration
	nodeTimeout time.Duration
	lockers     int
	setLockers  int // the last setLockers lockers take random sets of 1 to 3 keys (LockMany)
	rwLockers   int // the rwLockers before them take random keys as readers or writers (RLock, WLock)
	keys        []string
}

// nemesisLock takes one random key, or with sets a random set of one to
// three of keys, in a random order.
func nemesisLock(ctx context.Context, lk *redlock.Redlock, rng *rand.Rand, keys []string, sets bool) (*redlock.Lock, error) {
	if !sets {
		return lk.Lock(ctx, keys[rng.IntN(len(keys))])
	}
	perm := rng.Perm(len(keys))[:1+rng.IntN(min(3, len(keys)))]
	set := make([]string, len(perm))
	for i, j := range perm {
		set[i] = keys[j]
	}
	return lk.LockMany(ctx, set)
}

// nemesisRW takes a random key as a reader or as the writer.
func nemesisRW(ctx context.Context, lk *redlock.Redlock, rng *rand.Rand, keys []string, reading bool) (*redlock.Lock, error) {
	key := keys[rng.IntN(len(keys))]
	if reading {
		return lk.RLock(ctx, key)
	}
	return lk.WLock(ctx, key)
}

// nemesisEvent is one entry of the fault schedule, for the report.
type nemesisEvent struct {
	at     time.Time
	faults []faultproxy.Fault
}

// runNemesis runs lockers against the nodes while a nemesis goroutine
// changes faults on random minorities, then checks everything.
func runNemesis(t *testing.T, nodes *nemesisNodes, cfg nemesisRun) {
	t.Logf("nemesis seed %d (replay: %s=%d), duration %v, TTL %v, node timeout %v, %d lockers (%d of them on sets), keys %v",
		cfg.seed, nemesisSeedEnv, cfg.seed, cfg.duration, cfg.ttl, cfg.nodeTimeout, cfg.lockers, cfg.setLockers, cfg.keys)
	n := len(nodes.proxies)
	minority := n - redlock.Quorum(n)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	chk := exclusion.New()
	var (
		watch                      quorumWatch
		fences                     fenceRecords
		unlockErrs                 sync.Map // error class → *atomic.Int64
		notHeldValid               [2]atomic.Int64
		acquiredBy                 [2]atomic.Int64 // by lockers without / with go-redis resends
		fencedAcq                  atomic.Int64
		keyAcq                     atomic.Int64 // a set counts once for each of its keys
		fairAcq                    atomic.Int64 // by WithFairness lockers: queued, often granted by a release
		fairLockers                int
		setAcq                     atomic.Int64    // sets of two or three keys
		rwAcq                      [2]atomic.Int64 // readers, writers
		lateGrants                 atomic.Int64    // Lock returned after the lock's Until
		lockers                    sync.WaitGroup
		stopLockers                = make(chan struct{})
		schedule                   []nemesisEvent
		faultCount                 = map[faultproxy.Kind]int{}
		retriesOff, retriesDefault = -1, 0
	)
	countUnlock := func(class string) {
		v, _ := unlockErrs.LoadOrStore(class, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	for id := range cfg.lockers {
		resends := id%2 == 0
		fenced := id%4 < 2 // half fenced, crossing the resend halves
		maxRetries := retriesOff
		if resends {
			maxRetries = retriesDefault
		}
		opts := []redlock.Option{redlock.WithTTL(cfg.ttl), redlock.WithNodeTimeout(cfg.nodeTimeout), redlock.WithStrategy(redlock.Retry(6, 10*time.Millisecond))}
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		sets := id >= cfg.lockers-cfg.setLockers
		rw := !sets && id >= cfg.lockers-cfg.setLockers-cfg.rwLockers
		fair := id%4 == 3 && !sets && !rw // queued, often granted by a release (fair.go)
		if fair {
			opts = append(opts, redlock.WithFairness(true))
			fairLockers++
		}
		name := fmt.Sprintf("L%d", id)
		lk := nodes.locker(t, name, maxRetries, opts...)
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(id)+1))
		lockers.Go(func() {
			for acq := 0; ; {
				select {
				case <-stopLockers:
					return
				default:
				}
				lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
				callStart := time.Now()
				reading := rw && rng.IntN(2) == 0
				var l *redlock.Lock
				var err error
				if rw {
					l, err = nemesisRW(lctx, lk, rng, cfg.keys, reading)
				} else {
					l, err = nemesisLock(lctx, lk, rng, cfg.keys, sets)
				}
				if err != nil {
					lcancel()
					chk.Fail(faultClassify(err), fmt.Errorf("%s: %w", name, err))
					time.Sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond)
					continue
				}
				acq++
				keyAcq.Add(int64(len(l.Keys())))
				holder := fmt.Sprintf("%s#%d", name, acq)
				if over := time.Since(l.Until()); over >= 0 {
					// Granted with validity left, returned without: the
					// checker counts the section as empty.
					lateGrants.Add(1)
					if lateGrants.Load() <= 3 {
						t.Logf("%s: Lock returned %v after the lock's Until (the call took %v)", holder, over.Round(time.Millisecond), time.Since(callStart).Round(time.Millisecond))
					}
				}
				var in *exclusion.Entry
				if reading {
					in = chk.EnterShared(l.Key(), holder, l.Until())
					rwAcq[0].Add(1)
				} else {
					in = chk.EnterMany(l.Keys(), holder, l.Until())
				}
				if rw && !reading {
					rwAcq[1].Add(1)
				}
				if len(l.Keys()) > 1 {
					setAcq.Add(1)
				}
				if fair {
					fairAcq.Add(1)
				}
				if fenced && !reading { // a reader's fence is a writer's generation, not its own
					fences.add(holder, l)
					fencedAcq.Add(1)
				}
				if resends {
					acquiredBy[1].Add(1)
				} else {
					acquiredBy[0].Add(1)
				}
				hold := time.Duration(1+rng.IntN(80)) * time.Millisecond
				if reading {
					// The quorum watch reads the key's token, which a
					// reader does not write (the key holds the readers'
					// marker): readers are judged by the checker alone.
					select {
					case <-ctx.Done():
					case <-time.After(hold):
					}
				} else {
					watch.hold(ctx, nodes, l, holder, time.Now().Add(hold), 10*time.Millisecond)
				}
				in.Exit()
				validLeft := time.Until(l.Until()) > 0
				err = l.Unlock(lctx)
				lcancel()
				switch {
				case err == nil:
				case errors.Is(err, redlock.ErrUnavailable):
					countUnlock("unavailable")
				case errors.Is(err, redlock.ErrNotHeld):
					if validLeft {
						// Our key was on a quorum a moment ago (the watch
						// says so), yet the release found it on fewer: a
						// resent release that answered 0, or keys that
						// vanished. Counted, not judged here.
						countUnlock("not held, validity left")
						if resends {
							notHeldValid[1].Add(1)
						} else {
							notHeldValid[0].Add(1)
						}
					} else {
						countUnlock("not held, expired")
					}
				default:
					countUnlock("other: " + err.Error())
					chk.Fail(exclusion.Other, fmt.Errorf("%s: Unlock: %w", name, err))
				}
			}
		})
	}

	// The nemesis: every 50-300 ms, a random minority of nodes gets a
	// random fault each, the others pass. It runs for the duration, and
	// on a machine so loaded that the lockers have not reached the floor
	// of acquisitions (below) by then, up to twice as long.
	floor := int(cfg.duration/time.Second) * len(cfg.keys)
	start := time.Now()
	rng := rand.New(rand.NewPCG(cfg.seed, 0))
	for time.Since(start) < cfg.duration || (keyAcq.Load() < int64(floor) && time.Since(start) < 2*cfg.duration) {
		faults := make([]faultproxy.Fault, n)
		for _, i := range rng.Perm(n)[:rng.IntN(minority+1)] {
			switch rng.IntN(3) {
			case 0:
				d := cfg.nodeTimeout/2 + time.Duration(rng.Int64N(int64(10*cfg.nodeTimeout)))
				faults[i] = faultproxy.Fault{Kind: faultproxy.Late, Delay: d}
			case 1:
				faults[i] = faultproxy.Fault{Kind: faultproxy.LoseReply}
			case 2:
				faults[i] = faultproxy.Fault{Kind: faultproxy.Stall}
			}
		}
		for i, f := range faults {
			nodes.proxies[i].Set(f)
			faultCount[f.Kind]++
		}
		schedule = append(schedule, nemesisEvent{at: time.Now(), faults: faults})
		time.Sleep(time.Duration(50+rng.IntN(251)) * time.Millisecond)
	}
	elapsed := time.Since(start)
	nodes.setAll(faultproxy.Fault{})
	close(stopLockers)
	done := make(chan struct{})
	go func() { lockers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(faultWatchdog):
		cancel()
		t.Fatal("watchdog: lockers did not stop")
	}

	var proxied faultproxy.Stats
	for _, p := range nodes.proxies {
		st := p.Stats()
		proxied.Conns += st.Conns
		proxied.LateChunks += st.LateChunks
		proxied.AfterClose += st.AfterClose
		proxied.LostReplies += st.LostReplies
	}
	t.Logf("faults: %d schedule changes over %v; node-windows: pass %d, late %d, lose-reply %d, stall %d",
		len(schedule), time.Since(start).Round(time.Millisecond), faultCount[faultproxy.Pass], faultCount[faultproxy.Late],
		faultCount[faultproxy.LoseReply], faultCount[faultproxy.Stall])
	t.Logf("proxies: %d connections, %d chunks delayed by late, %d chunks (late or stalled) written after their client closed, %d replies lost",
		proxied.Conns, proxied.LateChunks, proxied.AfterClose, proxied.LostReplies)
	var unlocks []string
	unlockErrs.Range(func(k, v any) bool {
		unlocks = append(unlocks, fmt.Sprintf("%s: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(unlocks)
	t.Logf("acquisitions by lockers without go-redis resends %d, with %d (fenced %d, sets of several keys %d); Unlock errors: %s",
		acquiredBy[0].Load(), acquiredBy[1].Load(), fencedAcq.Load(), setAcq.Load(), strings.Join(unlocks, ", "))
	t.Logf("Unlock said ErrNotHeld with validity left: %d without resends, %d with", notHeldValid[0].Load(), notHeldValid[1].Load())
	t.Logf("Lock returned a lock already past its Until: %d times", lateGrants.Load())

	st := chk.Verify(t, "nemesis")
	watch.verify(t)
	pairs := fences.verify(t, chk.Sections())
	t.Logf("fencing: %d fenced acquisitions checked against an earlier holder", pairs)
	if st.Overlaps > 0 || watch.violations.Load() > 0 {
		nemesisReportSchedule(t, schedule, chk.Overlaps(), &watch)
	}

	// A run that acquired too little has not tested anything. The nemesis
	// changes the faults every 175 ms on average, so each key should see
	// several acquisitions per second: the floor asks for one per key
	// per second, far below what a healthy run makes (see README), yet
	// high enough that most fault windows met a holder. A set counts once
	// for each of its keys: each of them was acquired.
	perKey := 0
	for _, s := range chk.Sections() {
		perKey += len(s.Held())
	}
	t.Logf("key acquisitions (a set counts for each of its keys): %d, %.1f per key per second", perKey,
		float64(perKey)/float64(len(cfg.keys))/elapsed.Seconds())
	assert.GreaterOrEqual(t, perKey, floor, "too few key acquisitions (%d) in %v: the run tested little", perKey, elapsed.Round(time.Millisecond))
	assert.Positive(t, fencedAcq.Load(), "fenced lockers got the lock too")
	t.Logf("fair lockers: %d acquisitions", fairAcq.Load())
	if fairLockers > 0 {
		assert.Positive(t, fairAcq.Load(), "fair lockers got the lock too")
	}
	if cfg.setLockers > 0 {
		assert.Positive(t, setAcq.Load(), "set lockers got sets of several keys too")
	}
	t.Logf("read-write lockers: %d reader and %d writer acquisitions", rwAcq[0].Load(), rwAcq[1].Load())
	if cfg.rwLockers > 0 {
		assert.Positive(t, rwAcq[0].Load(), "readers got the lock too")
		assert.Positive(t, rwAcq[1].Load(), "writers got the lock too")
	}
	assert.Positive(t, faultCount[faultproxy.Late]+faultCount[faultproxy.LoseReply]+faultCount[faultproxy.Stall], "faults were injected")
}

// nemesisReportSchedule logs the fault schedule in the two seconds
// before each of the first overlaps and quorum-watch violations.
func nemesisReportSchedule(t *testing.T, schedule []nemesisEvent, overlaps []exclusion.Overlap, watch *quorumWatch) {
	t.Helper()
	type incident struct {
		what string
		at   time.Time
	}
	var incidents []incident
	for i, o := range overlaps {
		if i == 3 {
			break
		}
		incidents = append(incidents, incident{o.String(), o.From})
	}
	watch.mu.Lock()
	for i, at := range watch.firstAt {
		incidents = append(incidents, incident{watch.first[i], at})
	}
	watch.mu.Unlock()
	for _, in := range incidents {
		t.Logf("fault schedule (node faults in order) before %s:", in.what)
		for _, e := range schedule {
			if e.at.After(in.at.Add(-2*time.Second)) && !e.at.After(in.at) {
				t.Logf("  %s %v", e.at.Format("15:04:05.000"), e.faults)
			}
		}
	}
}

// TestNemesis runs the random nemesis on five redis-server processes:
// eight lockers (half fenced, half with go-redis's default resends), three
// keys: three lockers taking one key at a time, two taking a random key as
// a reader or as the writer (RLock, WLock) and three taking random sets of
// one to three keys (LockMany), so sets overlap each other, single keys,
// readers and writers; the checker judges every key (readers may overlap
// each other, nothing else may). TTL 500 ms, node timeout 40 ms.
// About 45 s by default.
func TestNemesis(t *testing.T) {
	c := redistest.Start(t, 5)
	runNemesis(t, nemesisProxies(t, c.Addrs()), nemesisRun{
		seed:        nemesisSeed(t),
		duration:    nemesisDuration(t, 45*time.Second),
		ttl:         500 * time.Millisecond,
		nodeTimeout: 40 * time.Millisecond,
		lockers:     9, // ids 0-3 single keys (0, 1 fenced; 3 fair), 4-5 readers and writers, 6-8 sets
		setLockers:  3,
		rwLockers:   2,
		keys:        []string{"nemesis-a", "nemesis-b", "nemesis-c"},
	})
}
