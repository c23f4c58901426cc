package main

import (
	"fmt"
	"io"
)

// summaryTable is the compact view BENCHMARKS.md holds: every target's
// ratio in a few small tables, and the missed ones listed. The full tables
// (tables.md) stay in bench/results.
func summaryTable(w io.Writer, r results) {
	ts := targets(r)
	met, rounds := 0, 0
	for _, t := range ts {
		if t.verdict() == "MET" {
			met++
		}
		rounds = max(rounds, len(t.rounds))
	}
	fmt.Fprintf(w, "**%d of %d targets met** (medians of %d rounds; in bold where missed).\n\n", met, len(ts), rounds)

	fmt.Fprintln(w, "Throughput, this library's go-redis adapter ÷ the best peer · ÷ the raw floor (target ≥ 1):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| operation | goroutines | N = 1 | N = 3 | N = 5 | N = 7 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, s := range []struct{ scenario, what string }{
		{"LockUnlock", "Lock+Unlock"}, {"TryLockHeld", "TryLockHeld"}, {"Extend", "Extend"},
	} {
		for _, g := range []int{1, 32} {
			scenario := s.scenario
			if g == 32 {
				scenario += "Parallel"
			}
			fmt.Fprintf(w, "| %s | %d |", s.what, g)
			for _, n := range targetNodes {
				ours, ok := r.ops(scenario, n, "redlock")
				best, bok := 0.0, false
				for _, p := range peers {
					if o, ok := r.ops(scenario, n, p); ok && o > best {
						best, bok = o, true
					}
				}
				cell := mark(ours, ok, best, bok, 1, true)
				if n >= 3 {
					raw, rok := r.ops(scenario, n, "raw")
					cell += " · " + mark(ours, ok, raw, rok, 1, true)
				}
				fmt.Fprintf(w, " %s |", cell)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprint(w, "| allocs/op ÷ the raw floor's (target ≤ 1) | 1 |")
	for _, n := range targetNodes {
		a, aok := r.med("LockUnlock", n, "redlock", "allocs/op")
		b, bok := r.med("LockUnlock", n, "raw", "allocs/op")
		fmt.Fprintf(w, " %s |", mark(a, aok, b, bok, 1, false))
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Hand-off, acquisitions/s ÷ the limit 1/(hold + Lock+Unlock p50) (target ≥ 0.9) · fairness, fewest ÷ most per worker:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| hand-off | N = 1 | N = 5 |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, h := range []struct {
		scenario, what string
		fair           float64
	}{{"Handoff", "one process", 0.9}, {"HandoffProcs", "8 processes", 0.7}} {
		for _, impl := range []struct{ name, label string }{{"redlock", ""}, {"redlock-fair", ", WithFairness(true)"}} {
			fmt.Fprintf(w, "| %s%s |", h.what, impl.label)
			for _, n := range handoffNodes {
				acq, aok := r.med(h.scenario, n, impl.name, "acq/s")
				lim, lok := r.med(h.scenario, n, impl.name, "limit-acq/s")
				f, fok := r.med(h.scenario, n, impl.name, "fairness")
				fmt.Fprintf(w, " %s · %s |", mark(acq, aok, lim, lok, 0.9, true), mark(f, fok, 1, fok, h.fair, true))
			}
			fmt.Fprintln(w)
		}
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Primitives against the compositions they replace, ops/s ÷ ops/s (target ≥ 1):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| primitive | N = 1 | N = 5 |")
	fmt.Fprintln(w, "|---|---:|---:|")
	for _, p := range primitives {
		fmt.Fprintf(w, "| %s |", p.what)
		for _, n := range handoffNodes {
			a, aok := r.ops(p.scenario, n, p.primitive)
			b, bok := r.ops(p.scenario, n, p.composition)
			fmt.Fprintf(w, " %s |", mark(a, aok, b, bok, 1, true))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w)
	for _, t := range ts {
		if v := t.verdict(); v != "MET" {
			fmt.Fprintf(w, "- %s %s: %s (%s)\n", v, t.what, num(t.value, t.ok, "%.2f"), t.figures)
		}
	}
}

// mark is a ÷ b to two decimals, in bold when it misses bound (at least
// bound, or at most), – when either was not measured.
func mark(a float64, aok bool, b float64, bok bool, bound float64, atLeast bool) string {
	if !aok || !bok || b == 0 {
		return "–"
	}
	v := a / b
	s := fmt.Sprintf("%.2f", v)
	if atLeast && v < bound || !atLeast && v > bound {
		return "**" + s + "**"
	}
	return s
}
