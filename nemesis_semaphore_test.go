package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSemaphoreNemesis runs the random network nemesis (nemesis_test.go)
// on a semaphore of two permits over five redis-server processes: four
// processes (lockers of their own, half fenced, half with go-redis's
// resends), two acquirers each, take a permit, hold it 1-80 ms and
// release it (TTL 1 s, node timeout 100 ms), while a random minority of the nodes delivers late, loses
// replies or stalls. Checked from outside: never more than two holders
// with valid permits at once and never two holders of one slot
// (internal/exclusion with a bound), per-slot fences strictly increasing
// across holders, a holder's slot key on a quorum while it holds (the
// quorum watch). About 20 s by default (REDLOCK_NEMESIS_DURATION and
// REDLOCK_NEMESIS_SEED apply).
func TestSemaphoreNemesis(t *testing.T) {
	c := redistest.Start(t, 5)
	runSemaphoreNemesis(t, nemesisProxies(t, c.Addrs()), semNemesisRun{
		seed:        nemesisSeed(t),
		duration:    nemesisDuration(t, 20*time.Second),
		ttl:         time.Second,
		nodeTimeout: 100 * time.Millisecond,
		processes:   4,
		acquirers:   2,
		permits:     2,
	})
}

// semNemesisName is the nemesis's semaphore.
const semNemesisName = "nemesis-sem"

// semNemesisRun is the semaphore nemesis's set-up.
type semNemesisRun struct {
	seed                 uint64
	duration             time.Duration
	ttl, nodeTimeout     time.Duration
	processes, acquirers int // acquirers per process, sharing its locker
	permits              int
}

// semNemesisTally is what the acquirers share.
type semNemesisTally struct {
	chk       *exclusion.Checker
	watch     quorumWatch
	fences    fenceRecords
	fenced    atomic.Int64
	lateGrant atomic.Int64 // Acquire returned a permit already past its Until
	unlockErr atomic.Int64 // ErrNotHeld or ErrUnavailable from Unlock: counted, not judged
}

// runSemaphoreNemesis runs the acquirers while the nemesis changes faults
// on random minorities, then checks everything.
func runSemaphoreNemesis(t *testing.T, nodes *nemesisNodes, cfg semNemesisRun) {
	const name = semNemesisName
	t.Logf("semaphore nemesis seed %d (replay: %s=%d), duration %v, TTL %v, node timeout %v, %d processes × %d acquirers, %d permits",
		cfg.seed, nemesisSeedEnv, cfg.seed, cfg.duration, cfg.ttl, cfg.nodeTimeout, cfg.processes, cfg.acquirers, cfg.permits)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	tl := &semNemesisTally{chk: exclusion.New()}
	tl.chk.Bound(name, cfg.permits)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for p := range cfg.processes {
		opts := []redlock.Option{redlock.WithTTL(cfg.ttl), redlock.WithNodeTimeout(cfg.nodeTimeout),
			redlock.WithStrategy(redlock.Retry(6, 10*time.Millisecond))}
		fenced := p%2 == 0
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		maxRetries := -1 // none; every other process keeps go-redis's resends
		if p%4 >= 2 {
			maxRetries = 0
		}
		sem, err := redlock.NewSemaphore(nodes.locker(t, fmt.Sprintf("P%d", p), maxRetries), name, cfg.permits, opts...)
		require.NoError(t, err)
		for a := range cfg.acquirers {
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(p*cfg.acquirers+a)+1))
			holder := fmt.Sprintf("P%d.%d", p, a)
			wg.Go(func() { semNemesisAcquirer(ctx, nodes, sem, holder, fenced, rng, stop, tl) })
		}
	}
	runFaults(nodes, rand.New(rand.NewPCG(cfg.seed, 0)), cfg.duration)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(faultWatchdog):
		cancel()
		t.Fatal("watchdog: acquirers did not stop")
	}
	semNemesisVerify(t, nodes, cfg, tl)
}

// semNemesisAcquirer takes permits until stop, holding each 1-80 ms
// under the quorum watch.
func semNemesisAcquirer(ctx context.Context, nodes *nemesisNodes, sem *redlock.Semaphore, name string, fenced bool,
	rng *rand.Rand, stop <-chan struct{}, tl *semNemesisTally) {
	for acq := 0; ; {
		select {
		case <-stop:
			return
		default:
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := sem.Acquire(actx)
		if err != nil {
			acancel()
			tl.chk.Fail(faultClassify(err), fmt.Errorf("%s: %w", name, err))
			time.Sleep(time.Duration(1+rng.IntN(5)) * time.Millisecond)
			continue
		}
		acq++
		holder := fmt.Sprintf("%s#%d", name, acq)
		if time.Until(l.Until()) <= 0 {
			tl.lateGrant.Add(1) // the checker counts the section as empty
		}
		in := tl.chk.EnterMany([]string{sem.Name(), l.Key()}, holder, l.Until())
		if fenced {
			tl.fences.add(holder, l)
			tl.fenced.Add(1)
		}
		hold := time.Duration(1+rng.IntN(80)) * time.Millisecond
		tl.watch.hold(ctx, nodes, l, holder, time.Now().Add(hold), 10*time.Millisecond)
		in.Exit()
		err = l.Unlock(actx)
		acancel()
		switch {
		case err == nil:
		case errors.Is(err, redlock.ErrUnavailable), errors.Is(err, redlock.ErrNotHeld):
			tl.unlockErr.Add(1)
		default:
			tl.chk.Fail(exclusion.Other, fmt.Errorf("%s: Unlock: %w", holder, err))
		}
	}
}

// semNemesisVerify judges the run: the bound and the slots (checker), the
// quorum watch, the fences per slot, and a floor on acquisitions.
func semNemesisVerify(t *testing.T, nodes *nemesisNodes, cfg semNemesisRun, tl *semNemesisTally) {
	t.Helper()
	var proxied faultproxy.Stats
	for _, p := range nodes.proxies {
		st := p.Stats()
		proxied.LateChunks += st.LateChunks
		proxied.AfterClose += st.AfterClose
		proxied.LostReplies += st.LostReplies
	}
	t.Logf("proxies: %d chunks delayed, %d written after their client closed, %d replies lost",
		proxied.LateChunks, proxied.AfterClose, proxied.LostReplies)
	t.Logf("fenced permits %d; Acquire returned a permit past its Until %d times; Unlock unconfirmed (not held or unavailable) %d times",
		tl.fenced.Load(), tl.lateGrant.Load(), tl.unlockErr.Load())
	st := tl.chk.Verify(t, "semaphore nemesis")
	tl.watch.verify(t)
	pairs := tl.fences.verify(t, tl.chk.Sections())
	t.Logf("fencing: %d fenced permits checked against an earlier holder of their slot", pairs)
	// A run that acquired too little has tested little. A healthy run
	// takes 5-10 permits per second; on a machine starved by other test
	// suites a run took 6 in 20 s (most rounds unavailable: three nodes
	// did not answer within the node timeout), so the floor is one per
	// ten seconds: low, but a run without a permit fails. Whether both
	// permits were ever held at once, and how many permits were fenced,
	// are logged, not asserted, for the same reason; the fault scenarios
	// (faults_semaphore_test.go) assert both.
	floor := max(1, int(cfg.duration/(10*time.Second)))
	t.Logf("permits: %d, %.1f per second; most holders at once: %d of %d permits", st.Acquisitions,
		float64(st.Acquisitions)/cfg.duration.Seconds(), tl.chk.MostInside(semNemesisName), cfg.permits)
	assert.GreaterOrEqual(t, st.Acquisitions, floor, "too few permits (%d) for %v: the run tested little", st.Acquisitions, cfg.duration)
	assert.Positive(t, proxied.LateChunks+proxied.LostReplies, "faults were injected and met traffic")
}
