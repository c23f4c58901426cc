package main

import (
	"bytes"
	"strings"
	"testing"
)

// Two rounds of one cell: the go-redis adapter 1000 then 2000 ops/s,
// rueidis 500 then 2500 (flush 1000 both), redsync 400 then 1000,
// redislock 500 then 500.
const delaySample = `BenchmarkDelayLine/rtt=0.2ms/N=1/g=1/impl=ping-2 	 100	 250000 ns/op	 250.0 p50-us	 300.0 p99-us
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redlock-2 	 100	 1000000 ns/op	 0.3 dl-chunks/op	 12 dl-late-p99-us	 25 dl-cpu-%
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redlock-rueidis-2 	 100	 2000000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redlock-rueidis-flushdelay-2 	 100	 1000000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redsync-2 	 100	 2500000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redislock-2 	 100	 2000000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=1/impl=ping-2 	 100	 260000 ns/op	 260.0 p50-us	 310.0 p99-us
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redlock-2 	 100	 500000 ns/op	 0.5 dl-chunks/op	 14 dl-late-p99-us	 27 dl-cpu-%
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redlock-rueidis-2 	 100	 400000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redlock-rueidis-flushdelay-2 	 100	 1000000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redsync-2 	 100	 1000000 ns/op
BenchmarkDelayLine/rtt=0.2ms/N=1/g=32/impl=redislock-2 	 100	 2000000 ns/op
`

func TestDelayLineTables(t *testing.T) {
	r, err := parseDelayLine(strings.NewReader(delaySample))
	if err != nil {
		t.Fatal(err)
	}
	c := dlCell{"0.2ms", 1, 32, "redlock"}
	if got := r.ops(c); len(got) != 2 || got[0] != 1000 || got[1] != 2000 {
		t.Errorf("ops/s of redlock by round = %v, want [1000 2000]", got)
	}
	// The better rueidis per round: 1000 (flush), then 2500.
	best := r.best(dlCell{"0.2ms", 1, 32, "redlock-rueidis"}, dlCell{"0.2ms", 1, 32, "redlock-rueidis-flushdelay"})
	if len(best) != 2 || best[0] != 1000 || best[1] != 2500 {
		t.Errorf("best rueidis by round = %v, want [1000 2500]", best)
	}
	var b bytes.Buffer
	delayLineTables(&b, r)
	out := b.String()
	for _, want := range []string{
		"| 0.2ms | 255 | 305 | 250 – 260 |",                   // ping: medians and range of p50
		"| 0.2ms | 1 | 32 | 1500 | 1500 | 1000 | 700 | 500 |", // ops/s medians
		// ÷ the best peer (500, then 1000): go-redis 2 and 2, rueidis 1
		// and 2.5, flush 2 and 1; go-redis ÷ the best rueidis 1 and 0.8.
		"| 0.2ms | 1 | 32 | 2.00 (2.00 – 2.00) | 1.75 (1.00 – 2.50) | 1.50 (1.00 – 2.00) | 0.90 (0.80 – 1.00) |",
		"| 0.2ms | 1 | 32 | 0.4 · 13 µs · 26 % |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the tables lack %q:\n%s", want, out)
		}
	}
}

// A round in which a cell failed lacks that cell; with the script's
// "round: k" lines the other rounds still pair up.
func TestDelayLineRoundsPairByNumber(t *testing.T) {
	const in = `round: 1
BenchmarkDelayLine/rtt=1ms/N=5/g=1/impl=redlock-2 	 10	 2000000 ns/op
BenchmarkDelayLine/rtt=1ms/N=5/g=1/impl=redlock-rueidis-2 	 10	 2500000 ns/op
round: 2
--- FAIL: BenchmarkDelayLine/rtt=1ms/N=5/g=1/impl=redlock
BenchmarkDelayLine/rtt=1ms/N=5/g=1/impl=redlock-rueidis-2 	 10	 9000000 ns/op
round: 3
BenchmarkDelayLine/rtt=1ms/N=5/g=1/impl=redlock-2 	 10	 2000000 ns/op
BenchmarkDelayLine/rtt=1ms/N=5/g=1/impl=redlock-rueidis-2 	 10	 3000000 ns/op
`
	r, err := parseDelayLine(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	gr, rue := r.ops(dlCell{"1ms", 5, 1, "redlock"}), r.ops(dlCell{"1ms", 5, 1, "redlock-rueidis"})
	if got := ratios(gr, rue); len(got) != 2 || got[0] != 1.25 || got[1] != 1.5 {
		t.Errorf("go-redis ÷ rueidis in rounds 1 and 3 = %v, want [1.25 1.5]", got)
	}
	var b bytes.Buffer
	delayLineTables(&b, r)
	if want := "| 1ms | 5 | 1 | – | – | – | 1.38 (1.25 – 1.50) [2] |"; !strings.Contains(b.String(), want) {
		t.Errorf("the tables lack %q:\n%s", want, b.String())
	}
}
