// Command tables turns the raw output of the bench module's benchmarks
// (go test -bench, any -count) into the Markdown tables of BENCHMARKS.md:
// medians per scenario, node count and contender, ratios against the raw
// floor and the peers, and BENCHMARKS.md's targets marked MET or MISSED.
//
//	go run ./tables results/raw.txt > results/tables.md
//	go run ./tables -adapters results/adapters-raw.txt   # the adapters alone
//	go run ./tables -delayline results/delayline-raw.txt # bench/delayline.sh's tables
//	go run ./tables -summary results/raw.txt      # the compact view BENCHMARKS.md holds
//
// benchstat gives the confidence intervals (bench/run.sh runs both); this
// gives the compact view and the verdicts, from the same file.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
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
	order := []string{"redlock", "redlock-fair", "redlock-rueidis", "redlock-rueidis-flushdelay", "raw", "ideal-handoff", "ideal-queued", "redsync", "redsync-1ms", "redislock"}
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
	"LockUnlock":          "Lock+Unlock, one goroutine",
	"LockUnlockParallel":  "Lock+Unlock, 32 goroutines on distinct keys",
	"TryLockHeld":         "One attempt on a held key (TryLock / Reject), one goroutine",
	"TryLockHeldParallel": "One attempt on a held key, 32 goroutines, each on a held key of its own",
	"Extend":              "Extend a held lock, one goroutine",
	"ExtendParallel":      "Extend a held lock, 32 goroutines, each on a lock of its own",
	"Handoff":             "Hand-off: 8 workers in one process, one key, 1 ms hold",
	"HandoffProcs":        "Hand-off: 8 worker processes, one key, 1 ms hold",
}

// throughputScenarios are the scenarios of the per-scenario ops/s tables,
// in the order printed.
var throughputScenarios = []string{"LockUnlock", "LockUnlockParallel", "TryLockHeld", "TryLockHeldParallel", "Extend", "ExtendParallel"}

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

// handoffTable is one hand-off scenario (Handoff, HandoffProcs): per
// contender, acquisitions/s beside the limit the benchmark reports
// (limit-acq/s: 1 / (hold + uncontended Lock+Unlock p50), measured in the
// same run), one worker's rate alone (solo-acq/s: its rounds come after a
// hold, as a hand-off's do), waits, fairness, and how long the untimed
// warm-up took (warmup-ms: the workers' first contended acquisitions,
// which the rate leaves out). A metric a benchmark does not report is
// shown as –.
func handoffTable(w io.Writer, r results, scenario string) {
	ns, impls := r.keys(scenario)
	if len(ns) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### %s\n\n", titles[scenario])
	fmt.Fprintln(w, "| N | impl | acquisitions/s | limit acq/s | ÷ limit | one worker alone, acq/s | ÷ alone | wait p50 ms | wait p99 ms | its p99 ÷ redlock's | fewest / most per worker | fairness | allocs/op | warm-up ms |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range ns {
		o99, o99ok := r.med(scenario, n, "redlock", "p99-wait-ms")
		for _, impl := range impls {
			acq, ok := r.med(scenario, n, impl, "acq/s")
			if !ok {
				continue
			}
			lim, limok := r.med(scenario, n, impl, "limit-acq/s")
			solo, sook := r.med(scenario, n, impl, "solo-acq/s")
			p50, p50ok := r.med(scenario, n, impl, "p50-wait-ms")
			p99, p99ok := r.med(scenario, n, impl, "p99-wait-ms")
			lo, look := r.med(scenario, n, impl, "min-acq")
			hi, hiok := r.med(scenario, n, impl, "max-acq")
			fair, fok := r.med(scenario, n, impl, "fairness")
			al, alok := r.med(scenario, n, impl, "allocs/op")
			warm, wok := r.med(scenario, n, impl, "warmup-ms")
			vs := ratio(p99, p99ok, o99, o99ok)
			if impl == "redlock" {
				vs = ""
			}
			fmt.Fprintf(w, "| %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |\n", n, impl, acq,
				num(lim, limok, "%.0f"), ratio(acq, ok, lim, limok), num(solo, sook, "%.0f"), ratio(acq, ok, solo, sook),
				num(p50, p50ok, "%.1f"), num(p99, p99ok, "%.1f"), vs,
				num(lo, look, "%.0f"), num(hi, hiok, "%.0f"), num(fair, fok, "%.2f"), num(al, alok, "%.0f"), num(warm, wok, "%.0f"))
		}
	}
}

// ideal is the bench contender that is no lock but the fastest hand-off
// one round allows (round-robin, one SET+PUBLISH script per node, no
// safety logic): what the machine allows. idealQueued is the same with
// one registration per node and waiting call (a ZADD): what the machine
// allows a lock whose nodes learn who waits.
const (
	ideal       = "ideal-handoff"
	idealQueued = "ideal-queued"
)

// idealTable puts, per hand-off scenario and N, the library's acq/s ÷
// the limit of the hand-off target (1 / (hold + the library's Lock+Unlock
// p50), its limit-acq/s) beside ideal-handoff's acq/s ÷ the same limit,
// all medians of the same run; and ideal-handoff's ratio to its own
// limit-acq/s, whose Lock+Unlock is the raw floor's (SET NX, then
// compare-and-delete); then what the limit counts for one hand-off (the
// library's uncontended Lock+Unlock p50, lu-p50-us) beside what one
// hand-off took, the library's and the ideal's (the key held by nobody,
// gap-p50-us), and the releasing worker's Unlock within it
// (release-p50-us; the rest is the next holder's wake-up); ideal-queued's
// acq/s and its ratio to the library's limit sit beside ideal-handoff's.
// Nothing is printed when ideal-handoff did not run.
func idealTable(w io.Writer, r results) {
	header := false
	for _, h := range []struct{ scenario, what string }{{"Handoff", "one process"}, {"HandoffProcs", "8 processes"}} {
		ns, _ := r.keys(h.scenario)
		for _, n := range ns {
			ia, iok := r.med(h.scenario, n, ideal, "acq/s")
			if !iok {
				continue
			}
			if !header {
				fmt.Fprint(w, "\n### The physical limit of a hand-off: ideal-handoff beside the library, same run\n\n")
				fmt.Fprintln(w, "| hand-off | N | limit acq/s (redlock's) | redlock acq/s | ÷ limit | ideal-handoff acq/s | ÷ limit | redlock ÷ ideal-handoff | ideal-handoff ÷ its own limit | ideal-queued acq/s | ÷ limit | Lock+Unlock p50 µs (redlock's) | gap p50 µs: redlock, ideal | release p50 µs: redlock, ideal |")
				fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
				header = true
			}
			lim, limok := r.med(h.scenario, n, "redlock", "limit-acq/s")
			ra, rok := r.med(h.scenario, n, "redlock", "acq/s")
			il, ilok := r.med(h.scenario, n, ideal, "limit-acq/s")
			qa, qok := r.med(h.scenario, n, idealQueued, "acq/s")
			lu, luok := r.med(h.scenario, n, "redlock", "lu-p50-us")
			both := func(metric string) string {
				a, aok := r.med(h.scenario, n, "redlock", metric)
				b, bok := r.med(h.scenario, n, ideal, metric)
				return num(a, aok, "%.0f") + ", " + num(b, bok, "%.0f")
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", h.what, n,
				num(lim, limok, "%.0f"), num(ra, rok, "%.0f"), ratio(ra, rok, lim, limok),
				ia, ratio(ia, iok, lim, limok), ratio(ra, rok, ia, iok), ratio(ia, iok, il, ilok),
				num(qa, qok, "%.0f"), ratio(qa, qok, lim, limok),
				num(lu, luok, "%.0f"), both("gap-p50-us"), both("release-p50-us"))
		}
	}
}

// primitives are the library's primitives against the compositions of
// mutexes they replace: the scenario and its two arms, the primitive
// first.
var primitives = []struct{ scenario, what, primitive, composition string }{
	{"Multi", "4 keys at once (LockMany) ÷ 4 Locks in sorted order", "lockmany", "mutexes"},
	{"Readers", "16 readers, 1 ms hold: RLock ÷ Lock with hand-off", "rlock", "mutex"},
	{"Semaphore", "4 permits, 8 goroutines, 1 ms hold: Semaphore ÷ 4 mutexes tried in turn", "semaphore", "mutexes"},
}

func primitiveTable(w io.Writer, r results) {
	header := false
	for _, p := range primitives {
		ns, _ := r.keys(p.scenario)
		for _, n := range ns {
			if !header {
				fmt.Fprint(w, "\n### Primitives against the mutexes they replace\n\n")
				fmt.Fprintln(w, "| scenario | N | arm | ops/s | primitive ÷ composition | allocs/op | B/op |")
				fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|")
				header = true
			}
			prim, primOK := r.ops(p.scenario, n, p.primitive)
			for _, arm := range []string{p.primitive, p.composition} {
				o, ok := r.ops(p.scenario, n, arm)
				if !ok {
					continue
				}
				vs := ""
				if arm == p.composition {
					vs = ratio(prim, primOK, o, ok)
				}
				al, alok := r.med(p.scenario, n, arm, "allocs/op")
				by, byok := r.med(p.scenario, n, arm, "B/op")
				fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %s | %s |\n", p.scenario, n, arm, o, vs,
					num(al, alok, "%.0f"), num(by, byok, "%.0f"))
			}
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

// target is one of BENCHMARKS.md's goals: a measured ratio against a bound,
// with the two figures it is the ratio of.
type target struct {
	what    string
	value   float64
	ok      bool // measured: false when a figure it needs is missing
	atLeast bool // the value must be >= bound, or else <= bound
	bound   float64
	figures string    // "a ÷ b", the medians the value is the ratio of
	rounds  []float64 // the same ratio round by round, when every round has both figures
}

func (t target) verdict() string {
	switch {
	case !t.ok:
		return "MISSING"
	case t.atLeast && t.value >= t.bound, !t.atLeast && t.value <= t.bound:
		return "MET"
	}
	return "MISSED"
}

// measured formats the target's value to two decimals, or to as many as
// it takes (up to six) to tell it from the bound when two would print the
// bound itself: 0.8978 against 0.90 reads 0.898, not a MISSED 0.90.
func (t target) measured() string {
	for prec := 2; ; prec++ {
		s := strconv.FormatFloat(t.value, 'f', prec, 64)
		if t.value == t.bound || prec == 6 || s != strconv.FormatFloat(t.bound, 'f', prec, 64) {
			return s
		}
	}
}

// peers are the other libraries a scenario's best peer is taken from.
var peers = []string{"redsync", "redislock"}

// The node counts the targets judge.
var (
	targetNodes  = []int{1, 3, 5, 7}
	handoffNodes = []int{1, 5}
)

// figure formats a median for the figures column.
func figure(v float64) string {
	switch {
	case v >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// perRound is num[j] ÷ den[j] for every round j, or nil when the two were
// not measured in the same rounds (a benchmark that failed in some round:
// the values can no longer be paired by their order). bench/run.sh runs
// every contender of a scenario once per round, so the j-th values of two
// contenders were measured seconds apart.
func perRound(num, den []float64) []float64 {
	if len(num) == 0 || len(num) != len(den) {
		return nil
	}
	rs := make([]float64, len(num))
	for j := range num {
		if den[j] == 0 {
			return nil
		}
		rs[j] = num[j] / den[j]
	}
	return rs
}

// targets are BENCHMARKS.md's, each computed from medians over the rounds, on
// the contender "redlock" (the go-redis adapter).
func targets(r results) []target {
	var ts []target
	add := func(what string, a float64, aok bool, b float64, bok bool, atLeast bool, bound float64, unit string, rounds []float64) {
		t := target{what: what, atLeast: atLeast, bound: bound, rounds: rounds}
		if aok && bok && b != 0 {
			t.value, t.ok = a/b, true
		}
		if aok || bok {
			t.figures = figures(a, aok, b, bok, unit)
		}
		ts = append(ts, t)
	}
	// opsRounds is a's ops/s ÷ b's round by round (their ns/op the other
	// way round).
	opsRounds := func(scenario string, n int, a, b string) []float64 {
		return perRound(r[key{scenario, n, b}]["ns/op"], r[key{scenario, n, a}]["ns/op"])
	}

	// Throughput against the best peer and the raw floor.
	for _, s := range []struct{ scenario, what string }{
		{"LockUnlock", "Lock+Unlock"}, {"TryLockHeld", "TryLockHeld"}, {"Extend", "Extend"},
	} {
		for _, g := range []int{1, 32} {
			scenario, gs := s.scenario, "1 goroutine"
			if g == 32 {
				scenario, gs = scenario+"Parallel", "32 goroutines"
			}
			for _, n := range targetNodes {
				ours, oursOK := r.ops(scenario, n, "redlock")
				best, bestOK, bestName := 0.0, false, "none measured"
				for _, p := range peers {
					if o, ok := r.ops(scenario, n, p); ok && o > best {
						best, bestOK, bestName = o, true, p
					}
				}
				add(fmt.Sprintf("%s, N = %d, %s: ops/s ÷ best peer (%s)", s.what, n, gs, bestName),
					ours, oursOK, best, bestOK, true, 1, " ops/s", opsRounds(scenario, n, "redlock", bestName))
				if n >= 3 {
					raw, rawOK := r.ops(scenario, n, "raw")
					add(fmt.Sprintf("%s, N = %d, %s: ops/s ÷ raw floor", s.what, n, gs),
						ours, oursOK, raw, rawOK, true, 1, " ops/s", opsRounds(scenario, n, "redlock", "raw"))
				}
			}
		}
	}

	// Allocations.
	for _, n := range targetNodes {
		a, aok := r.med("LockUnlock", n, "redlock", "allocs/op")
		b, bok := r.med("LockUnlock", n, "raw", "allocs/op")
		add(fmt.Sprintf("Lock+Unlock, N = %d: allocs/op ÷ raw floor's", n), a, aok, b, bok, false, 1, " allocs",
			perRound(r[key{"LockUnlock", n, "redlock"}]["allocs/op"], r[key{"LockUnlock", n, "raw"}]["allocs/op"]))
	}

	// Hand-off: acquisitions/s against the limit the run measured, and
	// fairness.
	for _, h := range []struct {
		scenario, what string
		fair           float64
	}{{"Handoff", "one process", 0.9}, {"HandoffProcs", "8 processes", 0.7}} {
		for _, impl := range []struct{ name, label string }{{"redlock", ""}, {"redlock-fair", " (WithFairness)"}} {
			for _, n := range handoffNodes {
				acq, acqOK := r.med(h.scenario, n, impl.name, "acq/s")
				lim, limOK := r.med(h.scenario, n, impl.name, "limit-acq/s")
				if impl.name != "redlock" && !acqOK {
					continue // the fair contender is optional
				}
				k := key{h.scenario, n, impl.name}
				add(fmt.Sprintf("hand-off, %s, N = %d%s: acq/s ÷ limit 1/(hold + Lock+Unlock p50)", h.what, n, impl.label),
					acq, acqOK, lim, limOK, true, 0.9, " acq/s", perRound(r[k]["acq/s"], r[k]["limit-acq/s"]))
				f, fok := r.med(h.scenario, n, impl.name, "fairness")
				t := target{what: fmt.Sprintf("hand-off, %s, N = %d%s: fairness (fewest ÷ most per worker)", h.what, n, impl.label),
					value: f, ok: fok, atLeast: true, bound: h.fair, rounds: r[k]["fairness"]}
				lo, look := r.med(h.scenario, n, impl.name, "min-acq")
				hi, hiok := r.med(h.scenario, n, impl.name, "max-acq")
				if look || hiok {
					t.figures = figures(lo, look, hi, hiok, " acq")
				}
				ts = append(ts, t)
			}
		}
	}

	// Primitives against the compositions they replace.
	for _, p := range primitives {
		for _, n := range handoffNodes {
			a, aok := r.ops(p.scenario, n, p.primitive)
			b, bok := r.ops(p.scenario, n, p.composition)
			add(fmt.Sprintf("%s, N = %d: ops/s", p.what, n), a, aok, b, bok, true, 1, " ops/s",
				opsRounds(p.scenario, n, p.primitive, p.composition))
		}
	}
	return ts
}

// spread is "lowest – highest" of vs, or – when there are none.
func spread(vs []float64) string {
	if len(vs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f – %.2f", slices.Min(vs), slices.Max(vs))
}

// figures is "a ÷ b unit", with – for a figure not measured.
func figures(a float64, aok bool, b float64, bok bool, unit string) string {
	fa, fb := "–", "–"
	if aok {
		fa = figure(a)
	}
	if bok {
		fb = figure(b)
	}
	return fa + " ÷ " + fb + unit
}

func targetTable(w io.Writer, r results) {
	fmt.Fprint(w, "\n### Targets\n\n")
	fmt.Fprintln(w, "| target | bound | measured | from (medians) | rounds: lowest – highest | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
	met, all := 0, 0
	for _, t := range targets(r) {
		bound := fmt.Sprintf("≥ %.2f", t.bound)
		if !t.atLeast {
			bound = fmt.Sprintf("≤ %.2f", t.bound)
		}
		val := "–"
		if t.ok {
			val = t.measured()
		}
		from := t.figures
		if from == "" {
			from = "–"
		}
		v := t.verdict()
		if v == "MET" {
			met++
		}
		all++
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", t.what, bound, val, from, spread(t.rounds), v)
	}
	fmt.Fprintf(w, "\n%d of %d targets met, each judged on its medians over the rounds; the rounds column gives the lowest and the highest "+
		"of the same ratio round by round (– when the rounds cannot be paired). "+
		"The targets are judged on this library's default go-redis adapter (`redlock`); "+
		"`redlock-rueidis` (its rueidis adapter) is shown beside it in the tables below for information. "+
		"MISSING: a figure the target needs is not in the run (a benchmark that did not run or does not report it).\n", met, all)
}

func main() {
	adaptersOnly := flag.Bool("adapters", false, "print only the table of the go-redis and rueidis adapters")
	delayLine := flag.Bool("delayline", false, "print the tables of BenchmarkDelayLine (bench/delayline.sh) instead")
	summary := flag.Bool("summary", false, "print only the compact summary BENCHMARKS.md holds")
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
	if *delayLine {
		r, err := parseDelayLine(in)
		if err == nil && len(r) == 0 {
			err = fmt.Errorf("no BenchmarkDelayLine/rtt=<rtt>/N=<n>/g=<g>/impl=<impl> lines in the input")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "tables:", err)
			os.Exit(1)
		}
		w := bufio.NewWriter(os.Stdout)
		defer w.Flush()
		delayLineTables(w, r)
		return
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
	if *summary {
		summaryTable(w, r)
		return
	}
	targetTable(w, r)
	idealTable(w, r)
	for _, s := range throughputScenarios {
		throughputTable(w, r, s)
	}
	handoffTable(w, r, "Handoff")
	handoffTable(w, r, "HandoffProcs")
	primitiveTable(w, r)
	adapterTable(w, r)
}
