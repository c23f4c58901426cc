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
PASS
`

func TestParseAndMedians(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
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
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	targetTable(&b, r)
	out := b.String()
	for _, want := range []string{
		// 1/400000 ÷ 1/380000 = 0.95: at the bound counts as met.
		"| 5 nodes, 1 goroutine, Lock+Unlock ops/s ÷ raw floor | ≥ 0.95 | 0.95 | MET |",
		// 600000/400000 = 1.5 ≥ 1.2.
		"| 5 nodes, 1 goroutine, Lock+Unlock ops/s ÷ redsync | ≥ 1.20 | 1.50 | MET |",
		// 193/144 = 1.34 > 0.5.
		"| 5 nodes, allocs per Lock+Unlock ÷ redsync's | ≤ 0.50 | 1.34 | MISSED |",
		"| single node, 1 goroutine, Lock+Unlock ops/s ÷ raw floor | ≥ 0.95 | – | NOT MEASURED |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
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
	r, err := parse(strings.NewReader(rounds))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	adapterTable(&b, r)
	// Per round: 100/80 = 1.25, 200/200 = 1.00, 150/100 = 1.50.
	for _, want := range []string{
		"| 1 | 1 | go-redis | 6667 |  |  |  | 90 | 300 | 48 |",
		"| 1 | 1 | rueidis | 10000 | 1.25 | 1.00 – 1.50 | 3 | 70 | 250 | 29 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}
