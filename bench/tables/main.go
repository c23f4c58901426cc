// Command tables turns the raw output of the bench module's benchmarks
// (go test -bench, any -count) into the Markdown tables of BENCHMARKS.md:
// medians per scenario, node count and contender, ratios against the raw
// floor and the peers, and the targets marked MET or MISSED.
//
//	go run ./tables results/raw.txt > results/tables.md
//	go run ./tables -adapters results/adapters-raw.txt   # the adapters alone
//
// benchstat gives the confidence intervals (bench/run.sh runs both); this
// gives the compact view and the verdicts, from the same file.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// sample is every value of one metric of one sub-benchmark, over -count.
type key struct {
	scenario string
	n        int
	impl     string
}

type results map[key]map[string][]float64

var line = regexp.MustCompile(`^Benchmark(\w+)/N=(\d+)/impl=([\w-]+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (results, error) {
	res := results{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		k := key{m[1], n, m[3]}
		if res[k] == nil {
			res[k] = map[string][]float64{}
		}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", sc.Text(), err)
			}
			res[k][f[i+1]] = append(res[k][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// med is the median of a metric, and false when it was not measured.
func (r results) med(scenario string, n int, impl, unit string) (float64, bool) {
	vs := slices.Clone(r[key{scenario, n, impl}][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	return median(vs), true
}

// ops is operations per second from the median ns/op.
func (r results) ops(scenario string, n int, impl string) (float64, bool) {
	ns, ok := r.med(scenario, n, impl, "ns/op")
	if !ok || ns == 0 {
		return 0, false
	}
	return 1e9 / ns, true
}

func (r results) keys(scenario string) (ns []int, impls []string) {
	order := []string{"redlock", "redlock-rueidis", "redlock-rueidis-flushdelay", "raw", "redsync", "redsync-1ms", "redislock"}
	for k := range r {
		if k.scenario != scenario {
			continue
		}
		if !slices.Contains(ns, k.n) {
			ns = append(ns, k.n)
		}
	}
	slices.Sort(ns)
	for _, i := range order {
		for k := range r {
			if k.scenario == scenario && k.impl == i {
				impls = append(impls, i)
				break
			}
		}
	}
	return ns, impls
}

func num(v float64, ok bool, format string) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func ratio(a float64, aok bool, b float64, bok bool) string {
	if !aok || !bok || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

var titles = map[string]string{
	"LockUnlock":         "Lock+Unlock, one goroutine",
	"LockUnlockParallel": "Lock+Unlock, 32 goroutines on distinct keys",
	"TryLockHeld":        "One attempt on a held key (TryLock / Reject)",
	"Extend":             "Extend a held lock",
}

func throughputTable(w io.Writer, r results, scenario string) {
	ns, impls := r.keys(scenario)
	if len(ns) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### %s\n\n", titles[scenario])
	fmt.Fprintln(w, "| N | impl | ops/s | ÷ raw | redlock ÷ it | p50 µs | p99 µs | allocs/op | B/op |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range ns {
		ours, oursOK := r.ops(scenario, n, "redlock")
		raw, rawOK := r.ops(scenario, n, "raw")
		for _, impl := range impls {
			o, ok := r.ops(scenario, n, impl)
			if !ok {
				continue
			}
			p50, p50ok := r.med(scenario, n, impl, "p50-us")
			p99, p99ok := r.med(scenario, n, impl, "p99-us")
			al, alok := r.med(scenario, n, impl, "allocs/op")
			by, byok := r.med(scenario, n, impl, "B/op")
			vs := ratio(ours, oursOK, o, ok)
			if impl == "redlock" {
				vs = ""
			}
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", n, impl, o,
				ratio(o, ok, raw, rawOK), vs, num(p50, p50ok, "%.0f"), num(p99, p99ok, "%.0f"),
				num(al, alok, "%.0f"), num(by, byok, "%.0f"))
		}
	}
}

func handoffTable(w io.Writer, r results) {
	ns, impls := r.keys("Handoff")
	if len(ns) == 0 {
		return
	}
	fmt.Fprint(w, "\n### Hand-off: 8 workers, one key, 1 ms hold\n\n")
	fmt.Fprintln(w, "| N | impl | acquisitions/s | wait p50 ms | wait p99 ms | its p99 ÷ redlock's | fewest / most per worker | fairness | allocs/op |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range ns {
		o99, o99ok := r.med("Handoff", n, "redlock", "p99-wait-ms")
		for _, impl := range impls {
			acq, ok := r.med("Handoff", n, impl, "acq/s")
			if !ok {
				continue
			}
			p50, p50ok := r.med("Handoff", n, impl, "p50-wait-ms")
			p99, p99ok := r.med("Handoff", n, impl, "p99-wait-ms")
			lo, look := r.med("Handoff", n, impl, "min-acq")
			hi, hiok := r.med("Handoff", n, impl, "max-acq")
			fair, fok := r.med("Handoff", n, impl, "fairness")
			al, alok := r.med("Handoff", n, impl, "allocs/op")
			vs := ratio(p99, p99ok, o99, o99ok)
			if impl == "redlock" {
				vs = ""
			}
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s / %s | %s | %s |\n", n, impl, acq,
				num(p50, p50ok, "%.1f"), num(p99, p99ok, "%.1f"), vs,
				num(lo, look, "%.0f"), num(hi, hiok, "%.0f"), num(fair, fok, "%.2f"), num(al, alok, "%.0f"))
		}
	}
}

// adapters are the library's Redis adapters in the bench module, the
// go-redis one first (the one the others are compared with).
var adapters = []struct{ impl, name string }{
	{"redlock", "go-redis"},
	{"redlock-rueidis", "rueidis"},
	{"redlock-rueidis-flushdelay", "rueidis, MaxFlushDelay"},
}

// adapterTable compares the library's adapters with the go-redis one,
// round by round. bench/run.sh and bench/adapters.sh run each round as one
// go test -count 1, so the i-th value of every contender is from round i,
// measured seconds apart: the ratio of each pair cancels what the machine
// was doing in that round, and the spread of the ratios over the rounds
// says how far to trust their median.
func adapterTable(w io.Writer, r results) {
	type row struct {
		scenario, goroutines string
		n                    int
	}
	var rows []row
	for _, s := range []struct{ scenario, goroutines string }{{"LockUnlock", "1"}, {"LockUnlockParallel", "32"}} {
		ns, _ := r.keys(s.scenario)
		for _, n := range ns {
			measured := 0
			for _, a := range adapters {
				if len(r[key{s.scenario, n, a.impl}]["ns/op"]) > 0 {
					measured++
				}
			}
			if measured > 1 && len(r[key{s.scenario, n, adapters[0].impl}]["ns/op"]) > 0 {
				rows = append(rows, row{s.scenario, s.goroutines, n})
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprint(w, "\n### Adapters: Lock+Unlock on go-redis and on rueidis\n\n")
	fmt.Fprintln(w, "| N | goroutines | adapter | ops/s | ÷ go-redis | lowest – highest of the rounds | rounds | p50 µs | p99 µs | allocs/op |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, rw := range rows {
		base := r[key{rw.scenario, rw.n, adapters[0].impl}]["ns/op"]
		for i, a := range adapters {
			ns := r[key{rw.scenario, rw.n, a.impl}]["ns/op"]
			if len(ns) == 0 {
				continue
			}
			o, _ := r.ops(rw.scenario, rw.n, a.impl)
			p50, p50ok := r.med(rw.scenario, rw.n, a.impl, "p50-us")
			p99, p99ok := r.med(rw.scenario, rw.n, a.impl, "p99-us")
			al, alok := r.med(rw.scenario, rw.n, a.impl, "allocs/op")
			vs, spread, rounds := "", "", ""
			if i > 0 {
				ratios := make([]float64, 0, min(len(base), len(ns)))
				for j := range min(len(base), len(ns)) {
					if ns[j] > 0 {
						ratios = append(ratios, base[j]/ns[j]) // its ops/s ÷ go-redis's, in round j
					}
				}
				slices.Sort(ratios)
				vs = fmt.Sprintf("%.2f", median(ratios))
				spread = fmt.Sprintf("%.2f – %.2f", ratios[0], ratios[len(ratios)-1])
				rounds = fmt.Sprint(len(ratios))
			}
			fmt.Fprintf(w, "| %d | %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", rw.n, rw.goroutines, a.name, o,
				vs, spread, rounds, num(p50, p50ok, "%.0f"), num(p99, p99ok, "%.0f"), num(al, alok, "%.0f"))
		}
	}
}

// median of sorted, non-empty values.
func median(vs []float64) float64 {
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

// target is one of the goals: a measured ratio against a bound.
type target struct {
	what    string
	value   float64
	ok      bool
	atLeast bool // the value must be >= bound, or else <= bound
	bound   float64
}

func targets(r results) []target {
	q := func(a float64, aok bool, b float64, bok bool) (float64, bool) {
		if !aok || !bok || b == 0 {
			return 0, false
		}
		return a / b, true
	}
	opsRatio := func(s string, n int, other string) (float64, bool) {
		a, aok := r.ops(s, n, "redlock")
		b, bok := r.ops(s, n, other)
		return q(a, aok, b, bok)
	}
	var ts []target
	add := func(what string, v float64, ok, atLeast bool, bound float64) {
		ts = append(ts, target{what, v, ok, atLeast, bound})
	}
	v, ok := opsRatio("LockUnlock", 1, "raw")
	add("single node, 1 goroutine, Lock+Unlock ops/s ÷ raw floor", v, ok, true, 0.95)
	v, ok = opsRatio("LockUnlock", 1, "redislock")
	add("single node, 1 goroutine, Lock+Unlock ops/s ÷ redislock", v, ok, true, 1.0)
	v, ok = opsRatio("LockUnlock", 1, "redsync")
	add("single node, 1 goroutine, Lock+Unlock ops/s ÷ redsync", v, ok, true, 1.25)
	v, ok = opsRatio("LockUnlock", 5, "raw")
	add("5 nodes, 1 goroutine, Lock+Unlock ops/s ÷ raw floor", v, ok, true, 0.95)
	v, ok = opsRatio("LockUnlock", 5, "redsync")
	add("5 nodes, 1 goroutine, Lock+Unlock ops/s ÷ redsync", v, ok, true, 1.2)
	v, ok = opsRatio("LockUnlockParallel", 5, "redsync")
	add("5 nodes, 32 goroutines, ops/s ÷ redsync", v, ok, true, 2)
	a, aok := r.med("Handoff", 5, "redsync", "p99-wait-ms")
	b, bok := r.med("Handoff", 5, "redlock", "p99-wait-ms")
	v, ok = q(a, aok, b, bok)
	add("hand-off, 5 nodes: redsync (defaults) wait p99 ÷ redlock wait p99", v, ok, true, 10)
	a, aok = r.med("Handoff", 5, "redlock", "acq/s")
	b, bok = r.med("Handoff", 5, "redsync", "acq/s")
	v, ok = q(a, aok, b, bok)
	add("hand-off, 5 nodes: acquisitions/s ÷ redsync (defaults)", v, ok, true, 1.5)
	v, ok = r.med("Handoff", 5, "redlock", "fairness")
	add("hand-off, 5 nodes: fewest ÷ most acquisitions per worker", v, ok, true, 0.7)
	a, aok = r.med("LockUnlock", 5, "redlock", "allocs/op")
	b, bok = r.med("LockUnlock", 5, "redsync", "allocs/op")
	v, ok = q(a, aok, b, bok)
	add("5 nodes, allocs per Lock+Unlock ÷ redsync's", v, ok, false, 0.5)
	return ts
}

func targetTable(w io.Writer, r results) {
	fmt.Fprint(w, "\n### Targets\n\n")
	fmt.Fprintln(w, "| target | bound | measured | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	for _, t := range targets(r) {
		bound := fmt.Sprintf("≥ %.2f", t.bound)
		if !t.atLeast {
			bound = fmt.Sprintf("≤ %.2f", t.bound)
		}
		verdict, val := "NOT MEASURED", "–"
		if t.ok {
			val = fmt.Sprintf("%.2f", t.value)
			verdict = "MISSED"
			if (t.atLeast && t.value >= t.bound) || (!t.atLeast && t.value <= t.bound) {
				verdict = "MET"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.what, bound, val, verdict)
	}
}

func main() {
	adaptersOnly := flag.Bool("adapters", false, "print only the table of the go-redis and rueidis adapters")
	flag.Parse()
	in := io.Reader(os.Stdin)
	if flag.NArg() > 0 {
		f, err := os.Open(flag.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "tables:", err)
			os.Exit(1)
		}
		defer f.Close()
		in = f
	}
	r, err := parse(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tables:", err)
		os.Exit(1)
	}
	if len(r) == 0 {
		fmt.Fprintln(os.Stderr, "tables: no Benchmark<Scenario>/N=<n>/impl=<impl> lines in the input")
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	if *adaptersOnly {
		adapterTable(w, r)
		return
	}
	targetTable(w, r)
	for _, s := range []string{"LockUnlock", "LockUnlockParallel", "TryLockHeld", "Extend"} {
		throughputTable(w, r, s)
	}
	handoffTable(w, r)
	adapterTable(w, r)
}
