package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// redlock bench --peers: the side-by-side scenarios of the bench module
// (this library, redsync, redislock and the raw floor on the same
// servers), run with go test in that module because the library does not
// depend on its competitors, then summarised as a table and charted.

// benchModule is the module path of the side-by-side benchmarks.
const benchModule = "module github.com/quorumlock/redlock/bench"

// peerScenarios are the bench module's scenarios --peers runs unless told
// otherwise: those of BENCHMARKS.md's tables, with their chart titles.
var peerScenarios = []struct{ name, title string }{
	{"LockUnlock", "LOCK+UNLOCK, 1 GOROUTINE"},
	{"LockUnlockParallel", "LOCK+UNLOCK, 32 GOROUTINES"},
	{"TryLockHeld", "TRYLOCK ON A HELD KEY, 1 GOROUTINE"},
	{"TryLockHeldParallel", "TRYLOCK ON A HELD KEY, 32 GOROUTINES"},
	{"Extend", "EXTEND, 1 GOROUTINE"},
	{"ExtendParallel", "EXTEND, 32 GOROUTINES"},
}

func defaultPeerScenarios() string {
	names := make([]string, len(peerScenarios))
	for i, s := range peerScenarios {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

// peersRun is one --peers run.
type peersRun struct {
	dir       string        // the bench module; "" finds it above the working directory
	scenarios []string      // benchmark names without "Benchmark"
	ns        []int         // node counts
	benchtime time.Duration // go test -benchtime
	addrs     []string      // the masters, passed on in REDLOCK_BENCH_ADDRS
	out       string        // a chart path: one chart per scenario beside it; "" for none
	stdout    io.Writer
}

// pattern is the go test -bench expression for the run's scenarios and
// node counts (every contender).
func (p peersRun) pattern() string {
	ns := make([]string, len(p.ns))
	for i, n := range p.ns {
		ns[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("^Benchmark(?:%s)$/^N=(?:%s)$/", strings.Join(p.scenarios, "|"), strings.Join(ns, "|"))
}

// goTest runs go test with args in dir, its output to stdout; tests
// replace it.
var goTest = func(ctx context.Context, dir string, args, env []string, stdout io.Writer) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to run the peers' benchmarks: %w", err)
	}
	cmd := exec.CommandContext(ctx, gobin, append([]string{"test"}, args...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	// go test starts the test binary, which starts redis-server processes
	// when not given masters: a cancelled run stops them all.
	ownGroup(cmd)
	cmd.Cancel = func() error { return signalGroup(cmd, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd.Run()
}

// runPeers runs the bench module's scenarios with go test, streaming its
// output, then prints ops/s, p50, p99 and allocations per scenario,
// contender and N, and draws a chart of ops/s against N per scenario.
func runPeers(ctx context.Context, p peersRun) error {
	dir := p.dir
	if dir == "" {
		dir = findBenchDir()
		if dir == "" {
			return errors.New("the peers' benchmarks live in the bench/ module of the source tree, which was not found above the working directory: run from a checkout of github.com/quorumlock/redlock, or pass --bench-dir")
		}
	}
	if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err != nil || !bytes.Contains(mod, []byte(benchModule)) {
		return fmt.Errorf("%s is not the bench module (its go.mod must say %q)", dir, benchModule)
	}
	args := []string{"-run", "^$", "-bench", p.pattern(), "-benchtime", p.benchtime.String(), "-count", "1", "-timeout", "60m", "."}
	fmt.Fprintf(p.stdout, "\npeers: go test %s\n  in %s, on %s\n", strings.Join(args, " "), dir, strings.Join(p.addrs, ","))
	var raw bytes.Buffer
	env := []string{"REDLOCK_BENCH_ADDRS=" + strings.Join(p.addrs, ",")}
	if err := goTest(ctx, dir, args, env, io.MultiWriter(p.stdout, &raw)); err != nil {
		return fmt.Errorf("go test in %s: %w", dir, err)
	}
	rows := parsePeers(&raw)
	if len(rows) == 0 {
		return fmt.Errorf("go test in %s printed no result of %s", dir, p.pattern())
	}
	fmt.Fprintln(p.stdout)
	printPeers(p.stdout, rows)
	if p.out == "" {
		return nil
	}
	for _, s := range peerScenarios {
		pl, ok := peerChart(s.name, s.title, rows)
		if !ok {
			continue
		}
		path := peerChartPath(p.out, s.name)
		if err := writePNG(path, pl.draw()); err != nil {
			return err
		}
		fmt.Fprintf(p.stdout, "chart written to %s\n", path)
	}
	return nil
}

// peerChartPath is the chart of scenario beside out: latency.png gives
// latency-peers-LockUnlock.png.
func peerChartPath(out, scenario string) string {
	ext := filepath.Ext(out)
	if ext == "" {
		ext = ".png"
	}
	return strings.TrimSuffix(out, filepath.Ext(out)) + "-peers-" + scenario + ext
}

// peerRow is one sub-benchmark's result: its metrics by unit.
type peerRow struct {
	scenario string
	n        int
	impl     string
	metrics  map[string]float64
}

func (r peerRow) opsPerSec() (float64, bool) {
	ns, ok := r.metrics["ns/op"]
	if !ok || ns <= 0 {
		return 0, false
	}
	return 1e9 / ns, true
}

var benchLine = regexp.MustCompile(`^Benchmark(\w+)/N=(\d+)/impl=([\w-]+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// parsePeers reads go test -bench output; with several lines of one
// sub-benchmark, the last counts.
func parsePeers(r io.Reader) []peerRow {
	var rows []peerRow
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		row := peerRow{scenario: m[1], n: n, impl: m[3], metrics: map[string]float64{}}
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				row.metrics[f[i+1]] = v
			}
		}
		if i := slices.IndexFunc(rows, func(o peerRow) bool {
			return o.scenario == row.scenario && o.n == row.n && o.impl == row.impl
		}); i >= 0 {
			rows[i] = row
			continue
		}
		rows = append(rows, row)
	}
	return rows
}

// printPeers prints one line per scenario, N and contender, with this
// library's ops/s over each contender's (above 1: this library is faster).
func printPeers(w io.Writer, rows []peerRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tN\timpl\tops/s\tredlock ÷ it\tp50\tp99\tallocs/op\t")
	metric := func(r peerRow, unit, format string) string {
		v, ok := r.metrics[unit]
		if !ok {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	for _, r := range rows {
		ops, ok := r.opsPerSec()
		if !ok {
			continue
		}
		vs := ""
		if r.impl != "redlock" {
			if i := slices.IndexFunc(rows, func(o peerRow) bool {
				return o.scenario == r.scenario && o.n == r.n && o.impl == "redlock"
			}); i >= 0 {
				if ours, ok := rows[i].opsPerSec(); ok {
					vs = fmt.Sprintf("%.2f", ours/ops)
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t\n", r.scenario, r.n, r.impl, ops, vs,
			metric(r, "p50-us", "%.0f µs"), metric(r, "p99-us", "%.0f µs"), metric(r, "allocs/op", "%.0f"))
	}
	tw.Flush()
}

// peerColors are the contenders' colors in the charts, this library's
// go-redis adapter in blue.
var peerColors = map[string]color.RGBA{
	"redlock":                    blue,
	"redlock-rueidis":            purple,
	"redlock-rueidis-flushdelay": teal,
	"raw":                        black,
	"redsync":                    red,
	"redsync-1ms":                orange,
	"redislock":                  green,
}

// peerChart is scenario's ops/s against N, one line per contender (a
// contender measured at one N only, as redislock is, is a dot); false
// when the scenario has no result.
func peerChart(scenario, title string, rows []peerRow) (plot, bool) {
	p := plot{title: title + ": OPS/S", unit: "OPS/S", legendRight: true}
	for _, r := range rows {
		ops, ok := r.opsPerSec()
		if r.scenario != scenario || !ok {
			continue
		}
		i := slices.IndexFunc(p.series, func(s series) bool { return s.name == r.impl })
		if i < 0 {
			c, ok := peerColors[r.impl]
			if !ok {
				c = brown
			}
			p.series = append(p.series, series{name: r.impl, color: c})
			i = len(p.series) - 1
		}
		p.series[i].points = append(p.series[i].points, point{r.n, ops})
	}
	for i := range p.series {
		slices.SortFunc(p.series[i].points, func(a, b point) int { return a.n - b.n })
	}
	return p, len(p.series) > 0
}

// findBenchDir looks for bench/go.mod in the working directory and its
// parents.
func findBenchDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		for _, cand := range []string{filepath.Join(dir, "bench"), dir} {
			if mod, err := os.ReadFile(filepath.Join(cand, "go.mod")); err == nil && bytes.Contains(mod, []byte(benchModule)) {
				return cand
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
