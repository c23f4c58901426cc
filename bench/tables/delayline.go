package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The tables of BenchmarkDelayLine (bench/delaybench_test.go, run by
// bench/delayline.sh): Lock+Unlock ops/s per round trip, node count,
// goroutine count and contender, and the ratios to the best peer round by
// round.

// dlCell is one sub-benchmark of BenchmarkDelayLine.
type dlCell struct {
	rtt  string // "0ms", "0.2ms", "1ms"
	n, g int
	impl string
}

// A series is one metric of one cell, by round. bench/delayline.sh
// writes a line "round: k" before round k's output; without such lines
// the i-th value of a cell is from round i. A round in which a cell
// failed simply lacks its value, and ratios pair only the rounds in which
// both figures were measured.
type series map[int]float64

// dlResults holds every metric of every cell.
type dlResults map[dlCell]map[string]series

var (
	dlLine  = regexp.MustCompile(`^BenchmarkDelayLine/rtt=([\d.]+ms)/N=(\d+)/g=(\d+)/impl=([\w-]+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	dlRound = regexp.MustCompile(`^round: (\d+)$`)
)

func parseDelayLine(r io.Reader) (dlResults, error) {
	res := dlResults{}
	round := -1 // -1: no "round:" line seen
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := dlRound.FindStringSubmatch(sc.Text()); m != nil {
			round, _ = strconv.Atoi(m[1])
			continue
		}
		m := dlLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		g, _ := strconv.Atoi(m[3])
		c := dlCell{m[1], n, g, m[4]}
		if res[c] == nil {
			res[c] = map[string]series{}
		}
		f := strings.Fields(m[5])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", sc.Text(), err)
			}
			unit := f[i+1]
			if res[c][unit] == nil {
				res[c][unit] = series{}
			}
			k := round
			if k < 0 {
				k = len(res[c][unit])
			}
			res[c][unit][k] = v
		}
	}
	return res, sc.Err()
}

// values are a series' values, sorted.
func (s series) values() []float64 {
	vs := make([]float64, 0, len(s))
	for _, v := range s {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// ops is the cell's ops/s by round (empty when not measured).
func (r dlResults) ops(c dlCell) series {
	ops := series{}
	for k, ns := range r[c]["ns/op"] {
		if ns > 0 {
			ops[k] = 1e9 / ns
		}
	}
	return ops
}

func (r dlResults) med(c dlCell, unit string) (float64, bool) {
	vs := r[c][unit].values()
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// best is, round by round, the highest ops/s of the cells cs measured in
// that round.
func (r dlResults) best(cs ...dlCell) series {
	b := series{}
	for _, c := range cs {
		for k, v := range r.ops(c) {
			if old, ok := b[k]; !ok || v > old {
				b[k] = v
			}
		}
	}
	return b
}

// ratios is num ÷ den in every round that measured both, sorted.
func ratios(num, den series) []float64 {
	var rs []float64
	for k, a := range num {
		if b, ok := den[k]; ok && b != 0 {
			rs = append(rs, a/b)
		}
	}
	slices.Sort(rs)
	return rs
}

// dlImpls are the contenders, in the tables' order, with their columns'
// names.
var dlImpls = []struct{ impl, name string }{
	{"redlock", "go-redis"},
	{"redlock-rueidis", "rueidis"},
	{"redlock-rueidis-flushdelay", "rueidis flush"},
	{"redsync", "redsync"},
	{"redislock", "redislock"},
}

// rows are the measured (rtt, N, goroutines), in order.
func (r dlResults) rows() []dlCell {
	var rows []dlCell
	for c := range r {
		row := dlCell{rtt: c.rtt, n: c.n, g: c.g}
		if c.impl != "ping" && !slices.Contains(rows, row) {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b dlCell) int {
		ra, _ := strconv.ParseFloat(strings.TrimSuffix(a.rtt, "ms"), 64)
		rb, _ := strconv.ParseFloat(strings.TrimSuffix(b.rtt, "ms"), 64)
		switch {
		case ra != rb:
			if ra < rb {
				return -1
			}
			return 1
		case a.n != b.n:
			return a.n - b.n
		}
		return a.g - b.g
	})
	return rows
}

// ratioCell is "median (lowest – highest)" of num ÷ den round by round,
// with a mark when the median reaches mark (0: no mark), and the number
// of rounds in brackets when fewer than rounds measured both.
func ratioCell(num, den series, mark float64, rounds int) string {
	rs := ratios(num, den)
	if len(rs) == 0 {
		return "–"
	}
	m := median(rs)
	s := fmt.Sprintf("%.2f (%.2f – %.2f)", m, rs[0], rs[len(rs)-1])
	if mark > 0 && m >= mark {
		s = "**" + s + "**"
	}
	if len(rs) < rounds {
		s += fmt.Sprintf(" [%d]", len(rs))
	}
	return s
}

func delayLineTables(w io.Writer, r dlResults) {
	rows := r.rows()
	rounds := 0
	for _, c := range r {
		rounds = max(rounds, len(c["ns/op"]))
	}

	fmt.Fprintf(w, "### PING round trip (impl=ping: one PING per operation, one node, one goroutine; medians of %d rounds)\n\n", rounds)
	fmt.Fprintln(w, "| rtt | p50 µs | p99 µs | lowest – highest p50 of the rounds |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, rtt := range []string{"0ms", "0.2ms", "1ms"} {
		c := dlCell{rtt, 1, 1, "ping"}
		p50, ok := r.med(c, "p50-us")
		if !ok {
			continue
		}
		p99, _ := r.med(c, "p99-us")
		vs := r[c]["p50-us"].values()
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f – %.0f |\n", rtt, p50, p99, vs[0], vs[len(vs)-1])
	}

	fmt.Fprintf(w, "\n### Lock+Unlock ops/s (medians of %d rounds)\n\n", rounds)
	fmt.Fprint(w, "| rtt | N | goroutines |")
	for _, i := range dlImpls {
		fmt.Fprintf(w, " %s |", i.name)
	}
	fmt.Fprint(w, "\n|---|---:|---:|")
	for range dlImpls {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %d | %d |", row.rtt, row.n, row.g)
		for _, i := range dlImpls {
			c := row
			c.impl = i.impl
			o := r.ops(c).values()
			if len(o) == 0 {
				fmt.Fprint(w, " – |")
				continue
			}
			fmt.Fprintf(w, " %.0f |", median(o))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n### Ratios of ops/s, round by round: median (lowest – highest) of %d rounds\n\n", rounds)
	fmt.Fprintln(w, "Each adapter ÷ the best peer (the better of redsync and redislock in the same round; redislock runs at N = 1 only), "+
		"and the go-redis adapter ÷ the better of the two rueidis configurations. "+
		"[k]: only k rounds measured both (a sub-benchmark failed in the others).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| rtt | N | goroutines | go-redis ÷ peer | rueidis ÷ peer | rueidis flush ÷ peer | go-redis ÷ rueidis (best) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, row := range rows {
		cell := func(impl string) dlCell { c := row; c.impl = impl; return c }
		gr := r.ops(cell("redlock"))
		rue, flush := r.ops(cell("redlock-rueidis")), r.ops(cell("redlock-rueidis-flushdelay"))
		rueBest := r.best(cell("redlock-rueidis"), cell("redlock-rueidis-flushdelay"))
		peer := r.best(cell("redsync"), cell("redislock"))
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s |\n", row.rtt, row.n, row.g,
			ratioCell(gr, peer, 0, rounds), ratioCell(rue, peer, 0, rounds), ratioCell(flush, peer, 0, rounds),
			ratioCell(gr, rueBest, 0, rounds))
	}

	fmt.Fprintf(w, "\n### Latency of one Lock+Unlock, one goroutine: p50 µs (medians of %d rounds)\n\n", rounds)
	fmt.Fprint(w, "| rtt | N |")
	for _, i := range dlImpls {
		fmt.Fprintf(w, " %s |", i.name)
	}
	fmt.Fprint(w, "\n|---|---:|")
	for range dlImpls {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		if row.g != 1 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d |", row.rtt, row.n)
		for _, i := range dlImpls {
			c := row
			c.impl = i.impl
			fmt.Fprintf(w, " %s |", num0(r.med(c, "p50-us")))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n### What the delay line saw (medians of %d rounds)\n\n", rounds)
	fmt.Fprintln(w, "Per contender: chunks it carried per Lock+Unlock (both directions, every node: fewer is more pipelining), "+
		"how late its 99th-percentile chunk left (µs past its due time), and its CPU time over the wall time (% of one core).")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| rtt | N | goroutines |")
	for _, i := range dlImpls {
		fmt.Fprintf(w, " %s |", i.name)
	}
	fmt.Fprint(w, "\n|---|---:|---:|")
	for range dlImpls {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		if row.rtt == "0ms" {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d |", row.rtt, row.n, row.g)
		for _, i := range dlImpls {
			c := row
			c.impl = i.impl
			ch, ok := r.med(c, "dl-chunks/op")
			if !ok {
				fmt.Fprint(w, " – |")
				continue
			}
			late, _ := r.med(c, "dl-late-p99-us")
			cpu, _ := r.med(c, "dl-cpu-%")
			fmt.Fprintf(w, " %.1f · %.0f µs · %.0f %% |", ch, late, cpu)
		}
		fmt.Fprintln(w)
	}
}

// num0 formats a median to no decimals, – when not measured.
func num0(v float64, ok bool) string { return num(v, ok, "%.0f") }
