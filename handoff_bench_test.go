package redlock_test

import (
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// BenchmarkHandoff measures what release notifications do for waiters: 8
// workers take turns on one key, each holding it for 1 ms, on one real
// redis-server and on five, with hand-off off (waiters sleep out their
// backoff) and on. One op is one acquisition. Reported:
//
//   - wait-p50-ms, wait-p99-ms: time from calling Lock to holding the lock;
//   - acq-min, acq-max: fewest and most acquisitions of one worker
//     (fairness: b.N/8 each would be perfectly fair);
//   - timeouts: Lock calls that ran out of retries (ErrTimeout);
//   - failed-attempts/op: attempts that did not get the lock, per
//     acquisition (the cost of waking a herd);
//   - acq/s: acquisitions per second until the last one. ns/op also
//     counts the workers still asleep in their backoff after the last
//     acquisition, which dominates it without hand-off.
//
// The strategy is Retry(8, 10ms): delays 10 ms to 1.28 s, 2.55 s in all.
//
// procs=1 runs the workers on one locker, as goroutines of one service
// do: with hand-off, they stand in one line and a release wakes one of
// them. procs=8 gives each worker its own connections and node names, so
// each is alone in its line, as eight processes would be: a release
// wakes all of them.
//
//	go test -run '^$' -bench BenchmarkHandoff -benchtime 400x
func BenchmarkHandoff(b *testing.B) {
	for _, n := range []int{1, 5} {
		c := redistest.Start(b, n)
		for _, procs := range []int{1, 8} {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("N=%d/procs=%d/handoff=%v", n, procs, on), func(b *testing.B) {
					benchHandoff(b, c.Addrs(), procs, on)
				})
			}
		}
	}
}

func benchHandoff(b *testing.B, addrs []string, procs int, handoff bool) {
	const workers, hold = 8, time.Millisecond
	var failed atomic.Int64
	count := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			failed.Add(1)
		}
	})
	opts := []redlock.Option{redlock.WithTTL(5 * time.Second), redlock.WithStrategy(redlock.Retry(8, 10*time.Millisecond)), redlock.WithHandoff(handoff),
		redlock.WithObserver(count)}
	lockers := make([]redlock.Locker, procs)
	for p := range lockers {
		bs := make([]driver.Node, len(addrs))
		for i, addr := range addrs {
			bs[i] = node(b, redistest.Client(b, addr)) // own clients and locker: another process
		}
		var err error
		if len(bs) == 1 {
			lockers[p], err = redlock.NewSingle(bs[0], opts...)
		} else {
			lockers[p], err = redlock.New(bs, opts...)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	ctx := b.Context()
	var next, timeouts, lastAcq, held atomic.Int64
	waits := make([][]time.Duration, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	begin := time.Now()
	for w := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				l, err := lockers[w%procs].Lock(ctx, "bench:handoff")
				if errors.Is(err, redlock.ErrTimeout) {
					timeouts.Add(1)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				waits[w] = append(waits[w], time.Since(start))
				lastAcq.Store(int64(time.Since(begin)))
				t0 := time.Now()
				time.Sleep(hold)
				held.Add(int64(time.Since(t0)))
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	var all []time.Duration
	least, most := b.N, 0
	for _, ws := range waits {
		all = append(all, ws...)
		least, most = min(least, len(ws)), max(most, len(ws))
	}
	if len(all) == 0 {
		b.Fatal("no acquisitions")
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "wait-p50-ms")
	b.ReportMetric(pct(0.99), "wait-p99-ms")
	b.ReportMetric(float64(least), "acq-min")
	b.ReportMetric(float64(most), "acq-max")
	b.ReportMetric(float64(timeouts.Load()), "timeouts")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed-attempts/op")
	b.ReportMetric(float64(len(all))/time.Duration(lastAcq.Load()).Seconds(), "acq/s")
	// The hold as measured: time.Sleep(1ms) overruns by up to a
	// millisecond when packets wake the process meanwhile (bench
	// module, BenchmarkSleep).
	b.ReportMetric(float64(held.Load())/float64(len(all))/float64(time.Millisecond), "hold-ms")
}
