package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redact"
	"github.com/redis/go-redis/v9"
)

// benchUsage is printed by redlock bench -h.
const benchUsage = `usage: redlock bench [flags]

Measures Lock+Unlock of a free key, Single against Redlock over N masters,
and prints ops/s, p50, p99 and allocations per Lock+Unlock.

Masters: --addrs uses yours (the first N of them for each N); otherwise
redis-server processes are started on free 127.0.0.1 ports and stopped at
the end (also on Ctrl-C); without redis-server on PATH, in-process
miniredis nodes are used, and the figures say little about a real server.

--peers then runs the side-by-side scenarios of BENCHMARKS.md (this library,
redsync, redislock and a hand-written raw floor, on the same masters as
above: yours or the local ones) for each N of --nodes, --duration each,
prints ops/s, p50, p99 and allocations per scenario, N and contender, and
with --out draws one chart per scenario of ops/s against N beside it
(latency.png: latency-peers-LockUnlock.png, ...). The peers live in the
bench/ module of the source tree (the library does not depend on its
competitors): --peers runs go test there, so it needs a checkout and the go
command. Its output is go test's, which bench/tables (in that module) turns
into BENCHMARKS.md's tables: go run ./tables output.txt.
`

// benchConfig is one row of the comparison: a locker kind over n masters.
type benchConfig struct {
	impl string // "single" or "redlock"
	n    int
}

// benchResult is what one configuration measured.
type benchResult struct {
	benchConfig
	ops      int
	errs     int
	elapsed  time.Duration
	p50, p99 time.Duration
	allocs   float64 // heap allocations per Lock+Unlock, from runtime.MemStats
}

func (r benchResult) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func bench(args []string) int {
	fs := newFlags("bench", benchUsage, os.Stdout, os.Stderr)
	var (
		addrs, nodes, out, benchDir, peerScen string
		dur                                   time.Duration
		conc                                  int
		peers                                 bool
	)
	fs.StringVar(&addrs, "addrs", "", "comma-separated host:port of your own Redis masters (default: start local ones)")
	fs.StringVar(&nodes, "nodes", "1,3,5,7", "comma-separated master counts N to measure Redlock with")
	fs.Duration(&dur, "duration", time.Second, true, "how long each configuration runs")
	fs.Int(&conc, "concurrency", 1, 1, 4, "goroutines locking, each on its own key")
	fs.StringVar(&out, "out", "", "write a PNG chart of p50 and p99 latency against N to this file")
	fs.Bool(&peers, "peers", "also run the scenarios against redsync, redislock and the raw floor (needs the source tree and go)")
	fs.StringVar(&benchDir, "bench-dir", "", "the bench/ module for --peers (default: found above the working directory)")
	fs.StringVar(&peerScen, "peers-scenarios", defaultPeerScenarios(), "comma-separated scenarios of the bench module for --peers")
	if status, ok := fs.parse(args); !ok {
		return status
	}
	if fs.NArg() > 0 {
		return fs.usage("unexpected argument %q", fs.Arg(0))
	}
	ns, err := parseCounts(nodes)
	var scenarios []string
	if err == nil && peers {
		scenarios, err = parseScenarios(peerScen)
	}
	var user []string
	if err == nil && addrs != "" {
		user, err = parseAddrs(addrs)
		if err == nil && slices.Max(ns) > len(user) {
			err = fmt.Errorf("--nodes asks for %d masters but --addrs gives %d", slices.Max(ns), len(user))
		}
	}
	if err != nil {
		return fs.usage("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	kind := "your servers"
	if user == nil {
		srv, err := startServers(ctx, slices.Max(ns))
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlock bench:", err)
			return exitFailure
		}
		defer func() {
			if err := srv.stop(); err != nil {
				fmt.Fprintln(os.Stderr, "redlock bench: stopping the local servers:", err)
			}
		}()
		user = srv.addrs
		kind = "local redis-server processes"
		if !srv.real {
			kind = "in-process miniredis"
			fmt.Fprintln(os.Stderr, "redlock bench: warning: redis-server is not on PATH; using in-process miniredis nodes, whose figures are not representative of a real server (apt-get install redis-server, or pass --addrs)")
		}
	}
	clients := make([]*redis.Client, len(user))
	for i, a := range user {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		defer clients[i].Close()
	}

	configs := []benchConfig{{"single", 1}}
	for _, n := range ns {
		configs = append(configs, benchConfig{"redlock", n})
	}
	fmt.Printf("Lock+Unlock of a free key, %d goroutine(s), %v per configuration, %s, GOMAXPROCS %d\n",
		conc, dur, kind, runtime.GOMAXPROCS(0))
	bar := newProgress(os.Stderr, len(configs), dur)
	var results []benchResult
	for i, cfg := range configs {
		bar.begin(i, fmt.Sprintf("%s N=%d", cfg.impl, cfg.n))
		res, err := measure(ctx, cfg, clients[:cfg.n], dur, conc)
		if err != nil {
			bar.done()
			fmt.Fprintf(os.Stderr, "redlock bench: %s N=%d: %v\n", cfg.impl, cfg.n, err)
			if ctx.Err() != nil {
				return exitInterrupted
			}
			return exitFailure
		}
		results = append(results, res)
	}
	bar.done()
	printTable(os.Stdout, results)

	if out != "" {
		if err := writeChart(out, results); err != nil {
			fmt.Fprintln(os.Stderr, "redlock bench:", err)
			return exitFailure
		}
		fmt.Printf("chart written to %s\n", out)
	}
	if peers {
		err := runPeers(ctx, peersRun{dir: benchDir, scenarios: scenarios, ns: ns, benchtime: dur,
			addrs: user, out: out, stdout: os.Stdout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "redlock bench: --peers:", err)
			if ctx.Err() != nil {
				return exitInterrupted
			}
			return exitFailure
		}
	}
	return exitOK
}

func parseCounts(s string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--nodes %q: want counts of 1 or more, such as 1,3,5", s)
		}
		if !slices.Contains(ns, n) {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}

// parseScenarios checks --peers-scenarios: names of benchmarks (without
// "Benchmark"), which go into a -bench expression.
func parseScenarios(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !benchName.MatchString(f) {
			return nil, fmt.Errorf("--peers-scenarios %q: want benchmark names such as %s", s, defaultPeerScenarios())
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--peers-scenarios is empty: want benchmark names such as %s", defaultPeerScenarios())
	}
	return out, nil
}

var benchName = regexp.MustCompile(`^[A-Z]\w*$`)

func parseAddrs(s string) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		// A URL, or user info, is refused; its text is masked, since it may
		// hold a password.
		if _, _, err := net.SplitHostPort(a); err != nil || strings.ContainsAny(a, "/@") {
			return nil, fmt.Errorf("--addrs %q: want host:port, such as 127.0.0.1:6379", redact.URLs(a))
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("--addrs is empty: want host:port, such as 127.0.0.1:6379")
	}
	return out, nil
}

// newLocker builds the locker a configuration measures, refusing when
// held: keys are distinct, so a refusal is a failure, not contention.
func newLocker(cfg benchConfig, clients []*redis.Client) (redlock.Locker, error) {
	bs := make([]driver.Node, len(clients))
	for i, c := range clients {
		b, err := goredis.New(c)
		if err != nil {
			return nil, err
		}
		bs[i] = b
	}
	opts := []redlock.Option{redlock.WithTTL(10 * time.Second), redlock.WithStrategy(redlock.Reject())}
	if cfg.impl == "single" {
		return redlock.NewSingle(bs[0], opts...)
	}
	return redlock.New(bs, opts...)
}

// measure runs Lock+Unlock in conc goroutines for d, after a short
// warm-up that opens connections and loads the scripts on every node.
// Allocations are the heap allocation count (runtime.MemStats.Mallocs)
// over the timed window divided by the operations in it, so they include
// the go-redis client's allocations, as a Go benchmark's allocs/op does.
func measure(ctx context.Context, cfg benchConfig, clients []*redis.Client, d time.Duration, conc int) (benchResult, error) {
	locker, err := newLocker(cfg, clients)
	if err != nil {
		return benchResult{}, err
	}
	key := fmt.Sprintf("redlock-bench:%s:%d", cfg.impl, cfg.n)
	for range 20 {
		l, err := locker.Lock(ctx, key)
		if err != nil {
			return benchResult{}, fmt.Errorf("warm-up: %w", err)
		}
		if err := l.Unlock(ctx); err != nil {
			return benchResult{}, fmt.Errorf("warm-up: %w", err)
		}
	}

	lats := make([][]time.Duration, conc)
	errs := make([]int, conc)
	firstErr := make([]error, conc)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for g := range conc {
		lats[g] = make([]time.Duration, 0, 1<<14)
		wg.Go(func() {
			k := fmt.Sprintf("%s:%d", key, g)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				l, err := locker.Lock(ctx, k)
				if err == nil {
					err = l.Unlock(ctx)
				}
				if err != nil {
					errs[g]++
					if firstErr[g] == nil {
						firstErr[g] = err
					}
					continue
				}
				lats[g] = append(lats[g], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err := ctx.Err(); err != nil {
		return benchResult{}, fmt.Errorf("interrupted: %w", err)
	}
	all := slices.Concat(lats...)
	res := benchResult{benchConfig: cfg, ops: len(all), elapsed: elapsed}
	for g := range conc {
		res.errs += errs[g]
		if err == nil {
			err = firstErr[g]
		}
	}
	if len(all) == 0 {
		return res, fmt.Errorf("no Lock+Unlock succeeded: %w", err)
	}
	if res.errs > len(all)/100 {
		return res, fmt.Errorf("%d of %d Lock+Unlock failed, first: %w", res.errs, res.errs+len(all), err)
	}
	slices.Sort(all)
	res.p50 = all[len(all)/2]
	res.p99 = all[len(all)*99/100]
	res.allocs = float64(after.Mallocs-before.Mallocs) / float64(len(all))
	return res, nil
}

func printTable(w io.Writer, rs []benchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "impl\tN\tops/s\tp50\tp99\tallocs/op\terrors\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%.0f\t%d\t\n", r.impl, r.n, r.opsPerSec(),
			roundDur(r.p50), roundDur(r.p99), r.allocs, r.errs)
	}
	tw.Flush()
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// progress draws a bar on a terminal (one line per configuration
// elsewhere) from its own goroutine, which done stops.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	each  time.Duration

	mu    sync.Mutex
	index int
	label string
	since time.Time

	stopOnce sync.Once
	quit     chan struct{}
	exited   chan struct{}
}

func newProgress(f *os.File, total int, each time.Duration) *progress {
	p := &progress{w: f, total: total, each: each, quit: make(chan struct{}), exited: make(chan struct{})}
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		p.tty = true
	}
	go p.loop()
	return p
}

func (p *progress) begin(i int, label string) {
	p.mu.Lock()
	p.index, p.label, p.since = i, label, time.Now()
	p.mu.Unlock()
	if !p.tty {
		fmt.Fprintf(p.w, "[%d/%d] %s\n", i+1, p.total, label)
	}
}

func (p *progress) loop() {
	defer close(p.exited)
	if !p.tty {
		<-p.quit
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 70))
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	frac := (float64(p.index) + min(1, float64(time.Since(p.since))/float64(p.each))) / float64(p.total)
	label := p.label
	p.mu.Unlock()
	const width = 30
	filled := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %-20s", strings.Repeat("#", filled), strings.Repeat("-", width-filled), frac*100, label)
}

// done stops the drawing goroutine and waits for it.
func (p *progress) done() {
	p.stopOnce.Do(func() { close(p.quit) })
	<-p.exited
}
