package redlock_test

// The semaphore under the fault scenarios' faults: a minority of the
// masters (two of five) killed, paused or partitioned while processes
// contend for the permits, on redis-server processes (TestSemaphoreFaults)
// and on Redis containers (TestDockerSemaphoreFaults). The checker
// (internal/exclusion, with the semaphore's name bounded by its permits)
// judges every permit: never more holders than permits with valid
// permits, never two holders of one slot; fenced permits' tokens rise per
// slot.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultMinority are the masters a scenario breaks: two of five, the
// most a quorum survives.
var faultMinority = []int{0, 1}

// minorityFault is one fault on a master and its repair.
type minorityFault struct {
	what        string
	inject, fix func(t *testing.T, i int)
}

// minorityFaults are the faults of the scenarios on a minority, each
// with a fresh cluster of five masters to break.
type minorityFaults []struct {
	name  string
	setUp func(t *testing.T) (*faultCluster, minorityFault)
}

// processFaults are SIGKILL (restarted empty after the TTL), SIGSTOP,
// and a partition through the forwarders (packets held, delivered after
// the heal), on redis-server processes.
func processFaults() minorityFaults {
	return minorityFaults{
		{"KillMinority", func(t *testing.T) (*faultCluster, minorityFault) {
			fc, _ := faultProcesses(t)
			return fc, minorityFault{"kill", fc.kill, fc.start}
		}},
		{"PauseMinority", func(t *testing.T) (*faultCluster, minorityFault) {
			fc, _ := faultProcesses(t)
			return fc, minorityFault{"pause", fc.pause, fc.resume}
		}},
		{"PartitionMinority", func(t *testing.T) (*faultCluster, minorityFault) {
			fc, proxies := faultProcesses(t)
			through := *fc
			through.addrs = fc.proxied
			return &through, minorityFault{"partition (forwarder stall)",
				func(_ *testing.T, i int) { proxies[i].Set(faultproxy.Fault{Kind: faultproxy.Stall}) },
				func(_ *testing.T, i int) { proxies[i].Set(faultproxy.Fault{}) }}
		}},
	}
}

// dockerFaults are docker kill (started again, empty, after the TTL),
// docker pause, and an iptables DROP partition, on Redis containers.
func dockerFaults() minorityFaults {
	return minorityFaults{
		{"KillMinority", func(t *testing.T) (*faultCluster, minorityFault) {
			fc, _ := faultContainers(t)
			return fc, minorityFault{"docker kill", fc.kill, fc.start}
		}},
		{"PauseMinority", func(t *testing.T) (*faultCluster, minorityFault) {
			fc, _ := faultContainers(t)
			return fc, minorityFault{"docker pause", fc.pause, fc.resume}
		}},
		{"PartitionMinority", func(t *testing.T) (*faultCluster, minorityFault) {
			fc, c := faultContainers(t)
			return fc, minorityFault{"partition (iptables DROP)",
				func(t *testing.T, i int) { c.Nodes[i].Partition(t) },
				func(t *testing.T, i int) { c.Nodes[i].Heal(t) }}
		}},
	}
}

// run runs scenario under each fault, on a fresh cluster each.
func (fs minorityFaults) run(t *testing.T, scenario func(*testing.T, *faultCluster, minorityFault)) {
	for _, f := range fs {
		t.Run(f.name, func(t *testing.T) {
			fc, mf := f.setUp(t)
			scenario(t, fc, mf)
		})
	}
}

// TestSemaphoreFaults runs the semaphore fault scenario on redis-server
// processes under each of processFaults.
func TestSemaphoreFaults(t *testing.T) { processFaults().run(t, faultSemaphoreUnder) }

// TestDockerSemaphoreFaults runs the semaphore fault scenario on five
// Redis containers under each of dockerFaults.
func TestDockerSemaphoreFaults(t *testing.T) { dockerFaults().run(t, faultSemaphoreUnder) }

// semFaultTTL is the permits' TTL in the scenarios.
const semFaultTTL = 2 * time.Second

// faultSemaphoreUnder has four processes contend for a semaphore of two
// permits, breaks a minority of the masters with f for at least a TTL
// (a killed master comes back empty: only after a TTL, the documented
// rule; a paused or partitioned one comes back with copies of permits
// that expired elsewhere, and with commands sent while it was cut off),
// then repairs them, and waits for permits in every phase (all up,
// broken, repaired).
func faultSemaphoreUnder(t *testing.T, fc *faultCluster, f minorityFault) {
	const name, permits = "sem-faults", 2
	chk := exclusion.New()
	chk.Bound(name, permits)
	var fences fenceRecords
	c := semContend(t, fc, chk, &fences, name, permits, 4)
	c.waitAcquisitions(t, 10, "permits with every master up")
	for _, i := range faultMinority {
		f.inject(t, i)
	}
	broken := time.Now() // the last master broken: the TTL counts from here
	c.waitAcquisitions(t, 10, "permits with a minority "+f.what)
	time.Sleep(time.Until(broken.Add(semFaultTTL)))
	for _, i := range faultMinority {
		f.fix(t, i)
	}
	c.waitAcquisitions(t, 10, "permits after the repair")
	c.Stop()
	st := chk.Verify(t, "semaphore, minority "+f.what)
	pairs := fences.verify(t, chk.Sections())
	t.Logf("fencing: %d fenced permits checked against an earlier holder of their slot; Unlock unconfirmed %d times",
		pairs, c.unlocks.Load())
	assert.Positive(t, pairs, "fenced permits followed one another on a slot")
	assert.GreaterOrEqual(t, st.Acquisitions, 30)
	assert.Equal(t, permits, chk.MostInside(name), "the permits were all held at once: the bound was tested")
}

// semContend starts processes acquirers, each with its own clients,
// locker and semaphore (half of them fenced), that take a permit, hold
// it 1-20 ms, and release it, until stopped.
func semContend(t *testing.T, fc *faultCluster, chk *exclusion.Checker, fences *fenceRecords, name string, permits, processes int) *faultContention {
	c := &faultContention{chk: chk, stop: make(chan struct{})}
	for p := range processes {
		opts := []redlock.Option{redlock.WithTTL(semFaultTTL), redlock.WithStrategy(redlock.Retry(5, 2*time.Millisecond))}
		fenced := p%2 == 0
		if fenced {
			opts = append(opts, redlock.WithFencing())
		}
		sem, err := redlock.NewSemaphore(fc.locker(t, fc.backends(t)), name, permits, opts...)
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(p), 0))
		c.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-c.stop:
					return
				default:
				}
				semHoldOnce(t, c, sem, fmt.Sprintf("P%d#%d", p, n), fenced, fences, rng)
			}
		})
	}
	t.Cleanup(c.Stop) // also when a watchdog ends the test early
	return c
}

// semHoldOnce takes one permit, holds it, and releases it, recording
// everything.
func semHoldOnce(t *testing.T, c *faultContention, sem *redlock.Semaphore, holder string, fenced bool, fences *fenceRecords, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := sem.Acquire(ctx)
	if err != nil {
		c.chk.Fail(faultClassify(err), fmt.Errorf("%s: %w", holder, err))
		time.Sleep(5 * time.Millisecond) // fast failures must not spin
		return
	}
	e := c.chk.EnterMany([]string{sem.Name(), l.Key()}, holder, l.Until())
	if fenced {
		fences.add(holder, l)
	}
	c.acq.Add(1)
	time.Sleep(time.Duration(1+rng.IntN(20)) * time.Millisecond)
	e.Exit()
	if err := l.Unlock(ctx); err != nil {
		// A permit granted by exactly a quorum cannot confirm its
		// release while one of those masters is broken.
		c.unlocks.Add(1)
		if !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrUnavailable) {
			c.chk.Fail(exclusion.Other, fmt.Errorf("%s: Unlock: %w", holder, err))
		}
	}
}
