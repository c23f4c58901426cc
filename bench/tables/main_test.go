package main

import (
	"bytes"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkLockUnlock/N=5/impl=redlock-2   	 2000	 500000 ns/op	 450.0 p50-us	 900.0 p99-us	 9400 B/op	 193 allocs/op
BenchmarkLockUnlock/N=5/impl=redsync-2   	 2000	 600000 ns/op	 9400 B/op	 144 allocs/op
BenchmarkLockUnlock/N=5/impl=redlock-2   	 2000	 300000 ns/op	 9400 B/op	 191 allocs/op
BenchmarkLockUnlock/N=5/impl=redlock-2   	 2000	 400000 ns/op	 9400 B/op	 195 allocs/op
BenchmarkLockUnlock/N=5/impl=raw-2       	 2000	 380000 ns/op	 3800 B/op	 110 allocs/op
BenchmarkHandoff/N=5/impl=redsync-1ms-2  	  300	 3000000 ns/op	 330 acq/s	 0.59 fairness
BenchmarkHandoff/N=5/impl=redlock-2      	  300	 1500000 ns/op	 640 acq/s	 700 limit-acq/s	 800 solo-acq/s	 34 min-acq	 40 max-acq	 0.85 fairness
BenchmarkHandoffProcs/N=5/impl=redlock-2 	  300	 2000000 ns/op	 500 acq/s	 0.75 fairness
BenchmarkHandoffProcs/N=5/impl=redlock-fair-2 	  300	 2500000 ns/op	 400 acq/s	 800 limit-acq/s	 0.95 fairness	 120 warmup-ms
BenchmarkMulti/N=1/impl=lockmany-2       	 1000	 2000000 ns/op	 4000 B/op	 64 allocs/op
BenchmarkMulti/N=1/impl=mutexes-2        	 1000	 1000000 ns/op	 12000 B/op	 192 allocs/op
PASS
`

func TestParseAndMedians(t *testing.T) {
	r := mustParse(t, sample)
	if got, ok := r.med("LockUnlock", 5, "redlock", "ns/op"); !ok || got != 400000 {
		t.Errorf("median ns/op of three runs = %v, %v; want 400000", got, ok)
	}
	if got, ok := r.med("LockUnlock", 5, "redsync", "allocs/op"); !ok || got != 144 {
		t.Errorf("redsync allocs/op = %v, %v; want 144", got, ok)
	}
	if got, ok := r.med("Handoff", 5, "redsync-1ms", "fairness"); !ok || got != 0.59 {
		t.Errorf("a dashed impl name and a custom metric: %v, %v; want 0.59", got, ok)
	}
	if _, ok := r.med("LockUnlock", 1, "redlock", "ns/op"); ok {
		t.Error("an unmeasured configuration reports a value")
	}
}

func TestTargetVerdicts(t *testing.T) {
	r := mustParse(t, sample)
	var b bytes.Buffer
	targetTable(&b, r)
	out := b.String()
	containsAll(t, out,
		// 1/400000 ÷ 1/600000 = 1.5: the best (only) peer is redsync.
		"| Lock+Unlock, N = 5, 1 goroutine: ops/s ÷ best peer (redsync) | ≥ 1.00 | 1.50 | 2500 ÷ 1667 ops/s | – | MET |",
		// 380000/400000 = 0.95 < 1.
		"| Lock+Unlock, N = 5, 1 goroutine: ops/s ÷ raw floor | ≥ 1.00 | 0.95 | 2500 ÷ 2632 ops/s | – | MISSED |",
		// 193/110 = 1.75 > 1.
		"| Lock+Unlock, N = 5: allocs/op ÷ raw floor's | ≤ 1.00 | 1.75 | 193 ÷ 110 allocs | – | MISSED |",
		// Nothing at N = 1: missing, not a crash.
		"| Lock+Unlock, N = 1, 1 goroutine: ops/s ÷ best peer (none measured) | ≥ 1.00 | – | – | – | MISSING |",
		// The hand-off limit is the benchmark's own metric: 640/700 = 0.91.
		"| hand-off, one process, N = 5: acq/s ÷ limit 1/(hold + Lock+Unlock p50) | ≥ 0.90 | 0.91 | 640 ÷ 700 acq/s | 0.91 – 0.91 | MET |",
		"| hand-off, one process, N = 5: fairness (fewest ÷ most per worker) | ≥ 0.90 | 0.85 | 34 ÷ 40 acq | 0.85 – 0.85 | MISSED |",
		// HandoffProcs reports acq/s but no limit: that target is missing.
		"| hand-off, 8 processes, N = 5: acq/s ÷ limit 1/(hold + Lock+Unlock p50) | ≥ 0.90 | – | 500 ÷ – acq/s | – | MISSING |",
		"| hand-off, 8 processes, N = 5: fairness (fewest ÷ most per worker) | ≥ 0.70 | 0.75 | – | 0.75 – 0.75 | MET |",
		// The fair contender is judged beside, where it ran: 400/800.
		"| hand-off, 8 processes, N = 5 (WithFairness): acq/s ÷ limit 1/(hold + Lock+Unlock p50) | ≥ 0.90 | 0.50 | 400 ÷ 800 acq/s | 0.50 – 0.50 | MISSED |",
		"| hand-off, 8 processes, N = 5 (WithFairness): fairness (fewest ÷ most per worker) | ≥ 0.70 | 0.95 | – | 0.95 – 0.95 | MET |",
		// 2 ms ÷ 1 ms per operation: the primitive is half as fast.
		"| 4 keys at once (LockMany) ÷ 4 Locks in sorted order, N = 1: ops/s | ≥ 1.00 | 0.50 | 500 ÷ 1000 ops/s | 0.50 – 0.50 | MISSED |",
		"| 16 readers, 1 ms hold: RLock ÷ Lock with hand-off, N = 1: ops/s | ≥ 1.00 | – | – | – | MISSING |",
		"4 of 62 targets met, each judged on its medians",
	)
}

// TestBestPeer: the best peer is the faster of redsync and redislock in
// each configuration.
func TestBestPeer(t *testing.T) {
	r := mustParse(t, `
BenchmarkExtendParallel/N=1/impl=redlock-2     1000  100000 ns/op
BenchmarkExtendParallel/N=1/impl=redsync-2     1000  200000 ns/op
BenchmarkExtendParallel/N=1/impl=redislock-2   1000   50000 ns/op
`)
	var b bytes.Buffer
	targetTable(&b, r)
	want := "| Extend, N = 1, 32 goroutines: ops/s ÷ best peer (redislock) | ≥ 1.00 | 0.50 | 10000 ÷ 20000 ops/s | 0.50 – 0.50 | MISSED |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("missing %q in\n%s", want, b.String())
	}
}

// TestTargetRounds: the rounds column pairs two contenders' values by
// round (their order in the run), and shows – when the counts differ.
func TestTargetRounds(t *testing.T) {
	r := mustParse(t, `
BenchmarkLockUnlock/N=3/impl=redlock-2   1000  100000 ns/op
BenchmarkLockUnlock/N=3/impl=redsync-2   1000  150000 ns/op
BenchmarkLockUnlock/N=3/impl=raw-2       1000  110000 ns/op
BenchmarkLockUnlock/N=3/impl=redlock-2   1000  200000 ns/op
BenchmarkLockUnlock/N=3/impl=redsync-2   1000  100000 ns/op
BenchmarkLockUnlock/N=3/impl=redlock-2   1000  100000 ns/op
BenchmarkLockUnlock/N=3/impl=redsync-2   1000  120000 ns/op
`)
	var b bytes.Buffer
	targetTable(&b, r)
	containsAll(t, b.String(),
		// Rounds 1.50, 0.50, 1.20; medians 100000 and 120000 ns/op: 1.20.
		"| Lock+Unlock, N = 3, 1 goroutine: ops/s ÷ best peer (redsync) | ≥ 1.00 | 1.20 | 10000 ÷ 8333 ops/s | 0.50 – 1.50 | MET |",
		// raw ran in one round of three: nothing to pair.
		"| Lock+Unlock, N = 3, 1 goroutine: ops/s ÷ raw floor | ≥ 1.00 | 1.10 | 10000 ÷ 9091 ops/s | – | MET |",
	)
}

// TestTablesWithoutTargetsFigures: every table prints from a run with
// only some scenarios, and the hand-off tables show – for metrics the
// benchmark does not report.
func TestTablesWithoutTargetsFigures(t *testing.T) {
	r := mustParse(t, sample)
	var b bytes.Buffer
	handoffTable(&b, r, "HandoffProcs")
	handoffTable(&b, r, "Handoff")
	primitiveTable(&b, r)
	containsAll(t, b.String(),
		"| 5 | redlock | 500 | – | – | – | – | – | – |  | – / – | 0.75 | – | – |",
		// The untimed warm-up's duration, in the last column.
		"| 5 | redlock-fair | 400 | 800 | 0.50 | – | – | – | – | – | – / – | 0.95 | – | 120 |",
		// One worker alone: 640 ÷ 800 = 0.80 beside the limit's 0.91.
		"| 5 | redlock | 640 | 700 | 0.91 | 800 | 0.80 |",
		"| Multi | 1 | lockmany | 500 |  | 64 | 4000 |",
		"| Multi | 1 | mutexes | 1000 | 0.50 | 192 | 12000 |",
	)
}

// TestIdealBesideLibrary: ideal-handoff's acq/s is divided by the
// library's limit, beside the library's own ratio, and by its own limit;
// a scenario where it did not run has no row.
func TestIdealBesideLibrary(t *testing.T) {
	r := mustParse(t, sample+`
BenchmarkHandoff/N=5/impl=ideal-handoff-2 	  300	 1400000 ns/op	 630 acq/s	 750 limit-acq/s	 300 gap-p50-us
BenchmarkHandoff/N=5/impl=ideal-handoff-2 	  300	 1400000 ns/op	 650 acq/s	 650 limit-acq/s	 500 gap-p50-us
BenchmarkHandoff/N=5/impl=ideal-handoff-2 	  300	 1400000 ns/op	 670 acq/s	 700 limit-acq/s
BenchmarkHandoff/N=5/impl=ideal-queued-2 	  300	 1400000 ns/op	 600 acq/s	 700 limit-acq/s
BenchmarkHandoff/N=5/impl=ideal-queued-2 	  300	 1400000 ns/op	 616 acq/s	 700 limit-acq/s
`)
	var b bytes.Buffer
	idealTable(&b, r)
	out := b.String()
	// 640 ÷ 700 = 0.91, 650 ÷ 700 = 0.93, 640 ÷ 650 = 0.98, 650 ÷ 700;
	// ideal-queued's median of two 608, ÷ 700 = 0.87; redlock's
	// Lock+Unlock p50, gap and release not in the sample, the ideal's gap
	// the median of two, its release in none.
	want := "| one process | 5 | 700 | 640 | 0.91 | 650 | 0.93 | 0.98 | 0.93 | 608 | 0.87 | – | –, 400 | –, – |"
	if !strings.Contains(out, want) {
		t.Errorf("missing %q in\n%s", want, out)
	}
	if strings.Contains(out, "8 processes") {
		t.Errorf("a row for a scenario ideal-handoff did not run in:\n%s", out)
	}
	b.Reset()
	idealTable(&b, mustParse(t, sample))
	if b.Len() != 0 {
		t.Errorf("a table without ideal-handoff:\n%s", b.String())
	}
}

// containsAll fails t for every want that out does not contain.
func containsAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// mustParse parses s, failing t on an error.
func mustParse(t *testing.T, s string) results {
	t.Helper()
	r, err := parse(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestAdapterRatiosPairRounds: the i-th line of each adapter is round i;
// the ratio is taken per round, then its median and range reported.
func TestAdapterRatiosPairRounds(t *testing.T) {
	const rounds = `
BenchmarkLockUnlock/N=1/impl=redlock-2           1000  100000 ns/op  90 p50-us  300 p99-us  2600 B/op  48 allocs/op
BenchmarkLockUnlock/N=1/impl=redlock-rueidis-2   1000   80000 ns/op  70 p50-us  250 p99-us  2600 B/op  29 allocs/op
BenchmarkLockUnlock/N=1/impl=redlock-2           1000  200000 ns/op  90 p50-us  300 p99-us  2600 B/op  48 allocs/op
BenchmarkLockUnlock/N=1/impl=redlock-rueidis-2   1000  200000 ns/op  70 p50-us  250 p99-us  2600 B/op  29 allocs/op
BenchmarkLockUnlock/N=1/impl=redlock-2           1000  150000 ns/op  90 p50-us  300 p99-us  2600 B/op  48 allocs/op
BenchmarkLockUnlock/N=1/impl=redlock-rueidis-2   1000  100000 ns/op  70 p50-us  250 p99-us  2600 B/op  29 allocs/op
`
	r := mustParse(t, rounds)
	var b bytes.Buffer
	adapterTable(&b, r)
	// Per round: 100/80 = 1.25, 200/200 = 1.00, 150/100 = 1.50.
	containsAll(t, b.String(),
		"| 1 | 1 | go-redis | 6667 |  |  |  | 90 | 300 | 48 |",
		"| 1 | 1 | rueidis | 10000 | 1.25 | 1.00 – 1.50 | 3 | 70 | 250 | 29 |",
	)
}

// A value that misses its bound by less than the last printed decimal
// shows the decimal that tells them apart, so a MISSED never reads as
// its own bound.
func TestMeasuredTellsTheValueFromTheBound(t *testing.T) {
	for _, c := range []struct {
		value, bound float64
		want         string
	}{
		{0.8978, 0.9, "0.898"},
		{0.9001, 0.9, "0.9001"},
		{0.90004, 0.9, "0.90004"},
		{0.9, 0.9, "0.90"},
		{0.8949, 0.9, "0.89"},
		{1.31, 1, "1.31"},
		{0.999, 1, "0.999"},
	} {
		tg := target{value: c.value, bound: c.bound, ok: true, atLeast: true}
		if got := tg.measured(); got != c.want {
			t.Errorf("measured(%v against %v) = %q; want %q", c.value, c.bound, got, c.want)
		}
	}
}
