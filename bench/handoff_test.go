package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Hand-off parameters: workers contending for one key, each holding it for
// hold once acquired.
const (
	handoffWorkers = 8
	handoffHold    = time.Millisecond
	// handoffPatience bounds one worker's wait for one acquisition across
	// as many calls of Acquire as it takes; past it the benchmark fails.
	handoffPatience = 60 * time.Second
	// handoffLUs is how many uncontended Lock+Unlock rounds measure the
	// contender's lu-p50 right before its hand-off.
	handoffLUs = 300
	// handoffSolo is how many lone Lock, hold, Unlock cycles measure
	// solo-acq/s.
	handoffSolo = 100
	// handoffWarmup is how many acquisitions each worker makes, all
	// workers contending, before the timer starts: the measured hand-off
	// is the steady state that limit-acq/s describes (lu-p50 and
	// solo-acq/s are measured warm too), not a process's first contended
	// calls, which dial connections and subscriptions (warmup-ms reports
	// what the warm-up took).
	handoffWarmup = 2
)

// Both hand-off benchmarks report, besides acq/s, p50-wait-ms,
// p99-wait-ms, min-acq, max-acq and fairness (fewest ÷ most acquisitions
// of one worker):
//
//   - hold-ms: the mean hold actually measured (time.Sleep(1ms) overshoots);
//   - lu-p50-us: the contender's uncontended Lock+Unlock p50, measured in
//     the same sub-benchmark right before the hand-off, on another key;
//   - limit-acq/s: 1 / (hold + lu-p50), the most a hand-off could reach if
//     every cycle were one hold plus one uncontended Lock+Unlock. The
//     target is acq/s ≥ 0.9 × limit-acq/s;
//   - solo-acq/s: one worker alone, nobody to hand to: Lock, hold,
//     Unlock, handoffSolo times, measured right before the hand-off. Its
//     rounds come after a hold, as a hand-off's do, where lu-p50 is
//     measured back to back (hot); on a machine whose idle cores and
//     threads take long to wake, solo-acq/s is below limit-acq/s, and the
//     gap is what the formula does not count;
//   - gap-p50-us: the p50 of the time the key is held by nobody, from
//     one holder starting its Unlock to the next holder's Acquire
//     returning (intervals in acquisition order): what one hand-off
//     costs, where the limit counts lu-p50;
//   - release-p50-us: the p50 of the releasing worker's Unlock, from its
//     start to its return: the part of the gap that is the release's
//     round (after a hold, so with idle cores to wake), the rest being
//     the next holder's wake-up;
//   - warmup-ms: how long the untimed warm-up took (handoffWarmup
//     acquisitions per worker, all contending, before the timer starts):
//     what a burst of contention costs workers that have not contended
//     yet, which the rates above leave out.

// luP50 measures c's uncontended Lock+Unlock p50 on key.
func luP50(b *testing.B, c Contender, key string) time.Duration {
	b.Helper()
	ctx := context.Background()
	lat := make(latencies, 0, handoffLUs)
	for range handoffLUs {
		t0 := time.Now()
		h, err := c.Acquire(ctx, key, false)
		if err != nil {
			b.Fatalf("lu-p50: %v", err)
		}
		if err := h.Unlock(ctx); err != nil {
			b.Fatalf("lu-p50: %v", err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[len(lat)/2]
}

// soloRate measures c's acquisitions/s for one worker alone on key, each
// lock held for handoffHold.
func soloRate(b *testing.B, c Contender, key string) float64 {
	b.Helper()
	ctx := context.Background()
	t0 := time.Now()
	for range handoffSolo {
		h, err := c.Acquire(ctx, key, false)
		if err != nil {
			b.Fatalf("solo: %v", err)
		}
		time.Sleep(handoffHold)
		if err := h.Unlock(ctx); err != nil {
			b.Fatalf("solo: %v", err)
		}
	}
	return handoffSolo / time.Since(t0).Seconds()
}

// handoffReport reports the metrics common to both hand-off benchmarks.
//
// intervals are the acquisitions' [acquired, releasing, released] times
// (ns on one clock: released is when Unlock returned), in any order;
// handoffReport sorts them.
func handoffReport(b *testing.B, elapsed, warmup, lu, holdSum time.Duration, solo float64, waits latencies, counts []int, intervals [][3]int64) {
	waits.report(b, "wait-ms", time.Millisecond)
	slices.SortFunc(intervals, func(x, y [3]int64) int { return cmp.Compare(x[0], y[0]) })
	if len(intervals) > 1 {
		gaps := make(latencies, 0, len(intervals)-1)
		for i := 1; i < len(intervals); i++ {
			gaps = append(gaps, time.Duration(intervals[i][0]-intervals[i-1][1]))
		}
		slices.Sort(gaps)
		b.ReportMetric(float64(gaps[len(gaps)/2])/float64(time.Microsecond), "gap-p50-us")
	}
	if len(intervals) > 0 {
		releases := make(latencies, 0, len(intervals))
		for _, iv := range intervals {
			releases = append(releases, time.Duration(iv[2]-iv[1]))
		}
		slices.Sort(releases)
		b.ReportMetric(float64(releases[len(releases)/2])/float64(time.Microsecond), "release-p50-us")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	lo, hi := slices.Min(counts), slices.Max(counts)
	b.ReportMetric(float64(lo), "min-acq")
	b.ReportMetric(float64(hi), "max-acq")
	if hi > 0 {
		b.ReportMetric(float64(lo)/float64(hi), "fairness")
	}
	hold := holdSum / time.Duration(max(b.N, 1))
	b.ReportMetric(float64(hold)/float64(time.Millisecond), "hold-ms")
	b.ReportMetric(float64(lu)/float64(time.Microsecond), "lu-p50-us")
	b.ReportMetric(1/(hold+lu).Seconds(), "limit-acq/s")
	b.ReportMetric(solo, "solo-acq/s")
	b.ReportMetric(float64(warmup)/float64(time.Millisecond), "warmup-ms")
}

// BenchmarkHandoff is 8 workers (goroutines of one process sharing one
// contender) taking turns on one key, each holding it for 1 ms, b.N
// acquisitions in all, timed after a warm-up (handoffWarmup). Each worker waits with its contender's own retry
// configuration and calls Acquire again when that gives up, so the wait
// measured is the time from wanting the lock to holding it.
func BenchmarkHandoff(b *testing.B) {
	each(b, contendedNodes, contended, func(b *testing.B, c Contender, key string) {
		lu := luP50(b, c, key+":lu")
		solo := soloRate(b, c, key+":solo")
		// A Rotator's workers each use a view of their own and make
		// exactly their share of each phase's turns; the others take a
		// phase's acquisitions first come, first served.
		cs := make([]Contender, handoffWorkers)
		rot, rotating := c.(Rotator)
		for w := range handoffWorkers {
			cs[w] = c
			if !rotating {
				continue
			}
			v, err := rot.Worker(context.Background(), key, w, handoffWorkers)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if err := v.Close(); err != nil {
					b.Error(err)
				}
			})
			cs[w] = v
		}
		waits := make([]latencies, handoffWorkers)
		spans := make([][][3]int64, handoffWorkers) // [acquired, releasing, released] since start
		for w := range handoffWorkers {
			waits[w], spans[w] = make(latencies, 0, b.N), make([][3]int64, 0, b.N)
		}
		counts := make([]int, handoffWorkers)
		holds := make([]time.Duration, handoffWorkers)
		var inside atomic.Int32
		// phase runs total acquisitions and returns when they are all
		// done; with record, their waits, holds and spans are kept.
		phase := func(total int, record bool) {
			var left atomic.Int64
			left.Store(int64(total))
			var wg sync.WaitGroup
			start := time.Now()
			for w := range handoffWorkers {
				more := func() bool { return left.Add(-1) >= 0 }
				if rotating {
					share := rotationShare(total, w, handoffWorkers)
					more = func() bool { share--; return share >= 0 }
				}
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), handoffPatience)
					defer cancel()
					for more() {
						t0 := time.Now()
						h, err := acquireWaiting(ctx, cs[w], key)
						if err != nil {
							b.Errorf("worker %d: %v", w, err)
							return
						}
						t1 := time.Now()
						if inside.Add(1) != 1 {
							b.Errorf("two holders at once")
						}
						time.Sleep(handoffHold)
						inside.Add(-1)
						t2 := time.Now()
						if err := h.Unlock(context.Background()); err != nil {
							b.Errorf("worker %d: unlock: %v", w, err)
						}
						if record {
							waits[w] = append(waits[w], t1.Sub(t0))
							holds[w] += t2.Sub(t1)
							spans[w] = append(spans[w], [3]int64{int64(t1.Sub(start)), int64(t2.Sub(start)), int64(time.Since(start))})
							counts[w]++
						}
					}
				})
			}
			wg.Wait()
		}
		t0 := time.Now()
		phase(handoffWarmup*handoffWorkers, false)
		warmup := time.Since(t0)
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		phase(b.N, true)
		elapsed := time.Since(start)
		b.StopTimer()
		var holdSum time.Duration
		for _, h := range holds {
			holdSum += h
		}
		handoffReport(b, elapsed, warmup, lu, holdSum, solo, slices.Concat(waits...), counts, slices.Concat(spans...))
	})
}

// acquireWaiting calls c.Acquire with waiting until it holds key, calling
// again when the contender's own retries give up, until ctx ends.
func acquireWaiting(ctx context.Context, c Contender, key string) (Held, error) {
	for {
		h, err := c.Acquire(ctx, key, true)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, ErrBusy) || ctx.Err() != nil {
			return nil, err
		}
	}
}

// Cross-process hand-off. The parent starts handoffWorkers copies of the
// test binary, each running TestHandoffWorker with handoffChildEnv set:
// one worker per process, each with its own clients and contender, as
// eight services sharing a lock would be. The parent hands out b.N
// tickets in all over the children's stdin, one line per acquisition; a
// child holding a ticket acquires the key, holds it, releases it and
// reports on file descriptor 3 (its stdout is the test framework's):
//
//	<wait ns> <acquired unix ns> <releasing unix ns> <released unix ns>
//
// The parent checks that no two [acquired, releasing] intervals overlap
// (one machine, one wall clock: mutual exclusion across processes) and
// gives the child its next ticket, until none is left. Every child starts
// with one ticket, so all eight contend all the time. The timer starts
// after a warm-up of handoffWarmup acquisitions per child, handed out the
// same way (the intervals checked include them).
const (
	handoffChildEnv = "REDLOCK_BENCH_HANDOFF_CHILD" // "<impl> <key> <addr>,<addr>... <child index>"
	// handoffProcsTimeout bounds one BenchmarkHandoffProcs sub-benchmark;
	// when it runs out every child is killed.
	handoffProcsTimeout = 5 * time.Minute
)

// BenchmarkHandoffProcs is BenchmarkHandoff with each of the 8 workers in
// a process of its own (see above): N=%d/impl=%s, the same contenders and
// metrics. lu-p50 is measured in the parent, on the same servers.
func BenchmarkHandoffProcs(b *testing.B) {
	if os.Getenv(handoffChildEnv) != "" {
		b.Skip("a hand-off worker process runs no benchmarks")
	}
	clients := servers(b)
	addrs := make([]string, len(clients))
	for i, c := range clients {
		addrs[i] = c.Options().Addr
	}
	for _, n := range contendedNodes {
		if n > len(clients) {
			continue
		}
		for _, impl := range contended {
			if impl == Redislock && n != 1 {
				continue
			}
			b.Run(fmt.Sprintf("N=%d/impl=%s", n, impl), func(b *testing.B) {
				c, err := New(impl, clients[:n])
				if err != nil {
					b.Fatal(err)
				}
				if cl, ok := c.(interface{ Close() }); ok {
					b.Cleanup(cl.Close)
				}
				key := fmt.Sprintf("bench:%s:%s:%d", b.Name(), impl, n)
				lu := luP50(b, c, key+":lu")
				solo := soloRate(b, c, key+":solo")
				_, rotating := c.(Rotator)
				handoffProcs(b, impl, key, addrs[:n], lu, solo, rotating)
			})
		}
	}
}

// handoffChild is the parent's end of one worker process.
type handoffChild struct {
	cmd     *exec.Cmd
	tickets io.WriteCloser
	reports *bufio.Scanner
}

// handoffResult is one acquisition as a child reports it.
type handoffResult struct {
	child          int
	wait           time.Duration
	acq, releasing int64 // unix ns
	released       int64 // unix ns, when Unlock returned
	err            error
}

// With rotating (a [Rotator]: child i takes turns i, i+8, ...), each
// child gets exactly its rotationShare of the tickets, one at a time, so
// that the child whose turn it is always has one: handing the last
// tickets to whoever reports first, as for the other contenders, could
// leave the next turn's child without one when the pipes deliver two
// reports out of order, and the rotation would stop.
func handoffProcs(b *testing.B, impl Impl, key string, addrs []string, lu time.Duration, solo float64, rotating bool) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), handoffProcsTimeout)
	children := make([]*handoffChild, 0, handoffWorkers)
	var reapers sync.WaitGroup
	b.Cleanup(func() {
		cancel() // kills every child still running (CommandContext)
		for _, ch := range children {
			ch.tickets.Close()
		}
		reapers.Wait()
	})
	results := make(chan handoffResult, handoffWorkers)
	send := func(r handoffResult) { // never blocks a reaper once the parent gave up
		select {
		case results <- r:
		case <-ctx.Done():
		}
	}
	for i := range handoffWorkers {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHandoffWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d", handoffChildEnv, impl, key, strings.Join(addrs, ","), i))
		cmd.Stderr = os.Stderr
		tickets, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd.ExtraFiles = []*os.File{w}
		if err := cmd.Start(); err != nil {
			r.Close()
			w.Close()
			b.Fatal(err)
		}
		w.Close()
		ch := &handoffChild{cmd: cmd, tickets: tickets, reports: bufio.NewScanner(r)}
		children = append(children, ch)
		reapers.Go(func() {
			defer r.Close()
			ready := false
			for ch.reports.Scan() {
				line := ch.reports.Text()
				if !ready {
					ready = line == "ready"
					send(handoffResult{child: i, err: ifNot(ready, "child %d: %q before ready", i, line)})
					continue
				}
				res := handoffResult{child: i}
				var wait int64
				if _, err := fmt.Sscan(line, &wait, &res.acq, &res.releasing, &res.released); err != nil {
					res.err = fmt.Errorf("child %d: %q: %w", i, line, err)
				}
				res.wait = time.Duration(wait)
				send(res)
			}
			err := cmd.Wait()
			if ctx.Err() == nil && err != nil {
				send(handoffResult{child: i, err: fmt.Errorf("child %d: %w", i, err)})
			}
		})
	}
	// Wait for every child to be ready (clients and contender built).
	for range handoffWorkers {
		select {
		case res := <-results:
			if res.err != nil {
				b.Fatal(res.err)
			}
		case <-ctx.Done():
			b.Fatal("hand-off children not ready in time")
		}
	}
	// hand hands out total tickets and returns their results as they
	// come: every child starts with one and gets the next as it reports,
	// first come, first served, or, rotating, until it has its
	// rotationShare of total.
	hand := func(total int) []handoffResult {
		given := make([]int, handoffWorkers)
		give := func(i int) {
			if _, err := io.WriteString(children[i].tickets, "go\n"); err != nil {
				b.Fatalf("ticket to child %d: %v", i, err)
			}
			given[i]++
		}
		handed := 0
		for i := range min(handoffWorkers, total) {
			give(i)
			handed++
		}
		out := make([]handoffResult, 0, total)
		for len(out) < total {
			var res handoffResult
			select {
			case res = <-results:
			case <-ctx.Done():
				b.Fatalf("hand-off: %d of %d acquisitions after %v", len(out), total, handoffProcsTimeout)
			}
			if res.err != nil {
				b.Fatal(res.err)
			}
			out = append(out, res)
			if rotating && given[res.child] < rotationShare(total, res.child, handoffWorkers) ||
				!rotating && handed < total {
				give(res.child)
				handed++
			}
		}
		return out
	}
	t0 := time.Now()
	warm := hand(handoffWarmup * handoffWorkers)
	warmup := time.Since(t0)
	b.ResetTimer()
	start := time.Now()
	measured := hand(b.N)
	elapsed := time.Since(start)
	b.StopTimer()
	for _, ch := range children {
		ch.tickets.Close() // the children exit on EOF
	}
	// Let them exit on their own (a child cleans up as it exits: an
	// ideal-handoff worker clears the grant nobody took) before the
	// cleanup's cancel would kill them; handoffProcsTimeout still bounds
	// the wait.
	reapers.Wait()
	for len(results) > 0 {
		if res := <-results; res.err != nil {
			b.Error(res.err)
		}
	}
	waits := make(latencies, 0, b.N)
	counts := make([]int, handoffWorkers)
	var holdSum time.Duration
	var intervals, all [][3]int64
	for i, res := range slices.Concat(warm, measured) {
		iv := [3]int64{res.acq, res.releasing, res.released}
		all = append(all, iv)
		if i < len(warm) {
			continue
		}
		counts[res.child]++
		waits = append(waits, res.wait)
		holdSum += time.Duration(res.releasing - res.acq)
		intervals = append(intervals, iv)
	}
	// Mutual exclusion is checked over the warm-up too.
	slices.SortFunc(all, func(x, y [3]int64) int { return cmp.Compare(x[0], y[0]) })
	for i := 1; i < len(all); i++ {
		if all[i][0] < all[i-1][1] {
			b.Errorf("two holders at once across processes: [%d, %d] and [%d, %d]",
				all[i-1][0], all[i-1][1], all[i][0], all[i][1])
		}
	}
	handoffReport(b, elapsed, warmup, lu, holdSum, solo, waits, counts, intervals)
}

func ifNot(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

// TestHandoffWorker is one worker process of BenchmarkHandoffProcs; it
// skips unless started by it.
func TestHandoffWorker(t *testing.T) {
	env := os.Getenv(handoffChildEnv)
	if env == "" {
		t.Skip("started by BenchmarkHandoffProcs only")
	}
	f := strings.Fields(env)
	if len(f) != 4 {
		t.Fatalf("%s=%q", handoffChildEnv, env)
	}
	impl, key := Impl(f[0]), f[1]
	index, err := strconv.Atoi(f[3])
	if err != nil {
		t.Fatalf("%s=%q: %v", handoffChildEnv, env, err)
	}
	var clients []*redis.Client
	for a := range strings.SplitSeq(f[2], ",") {
		c := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}
	c, err := New(impl, clients)
	if err != nil {
		t.Fatal(err)
	}
	if cl, ok := c.(interface{ Close() }); ok {
		defer cl.Close()
	}
	if rot, ok := c.(Rotator); ok { // this child takes turns index, index+8, ...
		v, err := rot.Worker(context.Background(), key, index, handoffWorkers)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		}()
		c = v
	}
	report := os.NewFile(3, "report")
	defer report.Close()
	out := bufio.NewWriter(report)
	fmt.Fprintln(out, "ready")
	if err := out.Flush(); err != nil {
		t.Fatal(err)
	}
	tickets := bufio.NewScanner(os.Stdin)
	for tickets.Scan() {
		ctx, cancel := context.WithTimeout(context.Background(), handoffPatience)
		t0 := time.Now()
		h, err := acquireWaiting(ctx, c, key)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		time.Sleep(handoffHold)
		t2 := time.Now()
		if err := h.Unlock(context.Background()); err != nil {
			t.Fatalf("unlock: %v", err)
		}
		fmt.Fprintln(out, strconv.FormatInt(int64(t1.Sub(t0)), 10), t1.UnixNano(), t2.UnixNano(), time.Now().UnixNano())
		if err := out.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRotationShare: the shares of a rotation are the turns each worker
// takes, and add up to the total, so that no turn is left without its
// worker.
func TestRotationShare(t *testing.T) {
	for n := 1; n <= handoffWorkers; n++ {
		for total := 0; total <= 50; total++ {
			sum := 0
			for i := range n {
				want := 0
				for turn := range total {
					if turn%n == i {
						want++
					}
				}
				if got := rotationShare(total, i, n); got != want {
					t.Errorf("rotationShare(%d, %d, %d) = %d, want %d", total, i, n, got, want)
				}
				sum += rotationShare(total, i, n)
			}
			if sum != total {
				t.Errorf("%d workers, %d turns: shares add up to %d", n, total, sum)
			}
		}
	}
}
