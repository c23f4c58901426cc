package main

import (
	"context"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nodes", "0"},
		{"--nodes", "1,x"},
		{"--duration", "0s"},
		{"--concurrency", "0"},
		{"--addrs", "nocolon"},
		{"--addrs", "127.0.0.1:1", "--nodes", "1,3"}, // more masters asked than given
		{"--no-such-flag"},
	} {
		assert.Equal(t, exitUsage, bench(args), "bench %v", args)
	}
}

// TestBenchRunsAndDrawsChart runs the whole command briefly, on local
// redis-server processes (or miniredis without the binary), and checks the
// chart: the right size, with both series drawn.
func TestBenchRunsAndDrawsChart(t *testing.T) {
	out := filepath.Join(t.TempDir(), "chart.png")
	require.Equal(t, 0, bench([]string{"--duration", "50ms", "--nodes", "1,3", "--out", out}))
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, chartW, img.Bounds().Dx())
	assert.Equal(t, chartH, img.Bounds().Dy())
	seen := colorCounts(img)
	// The legend alone draws some of each; the series draw more.
	assert.Greater(t, seen[blue], 200, "p50 series")
	assert.Greater(t, seen[red], 200, "p99 series")
	assert.Greater(t, seen[black], 1000, "axes and labels")
}

// TestBenchOnGivenServers runs against servers given with --addrs, with
// several goroutines, and checks that it leaves no key behind on them.
func TestBenchOnGivenServers(t *testing.T) {
	c := redistest.Start(t, 3)
	require.Equal(t, 0, bench([]string{"--addrs", strings.Join(c.Addrs(), ","), "--nodes", "1,3",
		"--concurrency", "4", "--duration", "50ms"}))
	for _, a := range c.Addrs() {
		cl := redis.NewClient(&redis.Options{Addr: a})
		n, err := cl.DBSize(t.Context()).Result()
		cl.Close()
		require.NoError(t, err)
		assert.Zero(t, n, "%s: every lock the benchmark took was released", a)
	}
}

// colorCounts counts img's pixels by color.
func colorCounts(img image.Image) map[color.RGBA]int {
	seen := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
		}
	}
	return seen
}

func TestGlyphsAreFiveBySeven(t *testing.T) {
	for r, g := range glyphs {
		assert.Len(t, g, 35, "glyph %q", r)
	}
}

func TestNiceScale(t *testing.T) {
	for _, tc := range []struct{ v, max, step float64 }{
		{0, 1, 0.25}, {2083, 2500, 500}, {95, 100, 20}, {1, 1, 0.2},
	} {
		m, s := niceScale(tc.v)
		assert.InDelta(t, tc.max, m, 1e-9, "max for %v", tc.v)
		assert.InDelta(t, tc.step, s, 1e-9, "step for %v", tc.v)
	}
}

// TestStartServersStopsThem checks that the servers the command starts
// answer, and are gone (process reaped, port closed) after stop.
func TestStartServersStopsThem(t *testing.T) {
	s, err := startServers(t.Context(), 2)
	require.NoError(t, err)
	defer s.stop()
	require.Len(t, s.addrs, 2)
	for _, a := range s.addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		err := c.Ping(t.Context()).Err()
		c.Close()
		require.NoError(t, err, "%s does not answer PING", a)
	}
	var pids []int
	if s.real {
		for _, srv := range s.procs.Servers {
			pids = append(pids, srv.PID())
		}
	}
	require.NoError(t, s.stop())
	for _, pid := range pids {
		assert.True(t, pidGone(pid), "redis-server pid %d still exists after stop", pid)
	}
	for _, a := range s.addrs {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
		}
		assert.Error(t, err, "%s still accepts connections after stop", a)
	}
	assert.NoError(t, s.stop(), "a second stop is harmless")
}

func TestRunPeersNeedsTheBenchModule(t *testing.T) {
	err := runPeers(context.Background(), peersRun{dir: t.TempDir(), scenarios: []string{"LockUnlock"}, ns: []int{1},
		benchtime: time.Second, stdout: io.Discard})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not the bench module")
}

func TestBenchRejectsBadPeerScenarios(t *testing.T) {
	for _, v := range []string{"", " , ", "Lock|Unlock", "lockUnlock", "Lock/N=1"} {
		assert.Equal(t, exitUsage, bench([]string{"--peers", "--peers-scenarios", v}), "--peers-scenarios %q", v)
	}
}

// TestPeersPattern: the -bench expression selects the scenarios and node
// counts asked for, every contender, and nothing else.
func TestPeersPattern(t *testing.T) {
	p := peersRun{scenarios: []string{"LockUnlock", "Extend"}, ns: []int{1, 5}}
	assert.Equal(t, "^Benchmark(?:LockUnlock|Extend)$/^N=(?:1|5)$/", p.pattern())
	levels := strings.Split(p.pattern(), "/")
	require.Len(t, levels, 3)
	match := func(level int, name string) bool { return regexp.MustCompile(levels[level]).MatchString(name) }
	assert.True(t, match(0, "BenchmarkLockUnlock"))
	assert.True(t, match(0, "BenchmarkExtend"))
	assert.False(t, match(0, "BenchmarkLockUnlockParallel"))
	assert.False(t, match(0, "BenchmarkExtendParallel"))
	assert.True(t, match(1, "N=5"))
	assert.False(t, match(1, "N=15"))
}

// peersOutput is what go test prints for two scenarios at N=1 and 3.
const peersOutput = `goos: linux
BenchmarkLockUnlock/N=1/impl=redlock-2         	    1000	    100000 ns/op	        90.00 p50-us	       300.0 p99-us	    2600 B/op	      48 allocs/op
BenchmarkLockUnlock/N=1/impl=redsync-2         	    1000	    125000 ns/op	       110.0 p50-us	       350.0 p99-us	    1800 B/op	      40 allocs/op
BenchmarkLockUnlock/N=1/impl=redislock-2       	    1000	     80000 ns/op	        70.00 p50-us	       250.0 p99-us	    1200 B/op	      33 allocs/op
BenchmarkLockUnlock/N=3/impl=redlock-2         	    1000	    250000 ns/op	       240.0 p50-us	       500.0 p99-us	    4000 B/op	      86 allocs/op
BenchmarkLockUnlock/N=3/impl=redsync-2         	    1000	    300000 ns/op	       290.0 p50-us	       550.0 p99-us	    3600 B/op	      92 allocs/op
BenchmarkExtend/N=1/impl=redlock-2             	    1000	     50000 ns/op	     952 B/op	      19 allocs/op
BenchmarkExtend/N=3/impl=redlock-2             	    1000	    150000 ns/op	    1720 B/op	      41 allocs/op
PASS
`

// TestRunPeersTablesAndCharts runs --peers on go test output given by a
// stand-in for go test: the arguments and masters it is given, the table
// printed, and a chart per scenario with every contender's color.
func TestRunPeersTablesAndCharts(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(benchModule+"\n"), 0o644))
	var gotArgs, gotEnv []string
	saved := goTest
	t.Cleanup(func() { goTest = saved })
	goTest = func(ctx context.Context, d string, args, env []string, stdout io.Writer) error {
		assert.Equal(t, dir, d)
		gotArgs, gotEnv = args, env
		_, err := io.WriteString(stdout, peersOutput)
		return err
	}
	out := filepath.Join(t.TempDir(), "latency.png")
	var printed strings.Builder
	require.NoError(t, runPeers(t.Context(), peersRun{dir: dir, scenarios: []string{"LockUnlock", "Extend"},
		ns: []int{1, 3}, benchtime: 250 * time.Millisecond, addrs: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"},
		out: out, stdout: &printed}))
	assert.Contains(t, strings.Join(gotArgs, " "), "-bench ^Benchmark(?:LockUnlock|Extend)$/^N=(?:1|3)$/ -benchtime 250ms -count 1")
	assert.Equal(t, []string{"REDLOCK_BENCH_ADDRS=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, gotEnv)

	// redlock ÷ redsync at N=1: 125000/100000; ÷ redislock: 80000/100000.
	table := printed.String()
	for _, want := range [][]string{
		{"LockUnlock", "1", "redsync", "8000", "1.25", "110 µs", "350 µs", "40"},
		{"LockUnlock", "1", "redislock", "12500", "0.80"},
		{"Extend", "3", "redlock", "6667", "–", "–", "41"},
	} {
		assert.Regexp(t, strings.Join(want, `\s+`), table)
	}

	for scenario, colors := range map[string][]color.RGBA{
		"LockUnlock": {blue, red, green},
		"Extend":     {blue},
	} {
		path := peerChartPath(out, scenario)
		assert.Contains(t, table, "chart written to "+path)
		f, err := os.Open(path)
		require.NoError(t, err, scenario)
		img, err := png.Decode(f)
		f.Close()
		require.NoError(t, err)
		assert.Equal(t, chartW, img.Bounds().Dx())
		seen := colorCounts(img)
		for _, c := range colors {
			assert.Greater(t, seen[c], 100, "%s: color %v", scenario, c)
		}
	}
	_, err := os.Stat(peerChartPath(out, "TryLockHeld"))
	assert.True(t, os.IsNotExist(err), "no chart for a scenario not measured")
}

func TestRunPeersFailsWithoutResults(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(benchModule+"\n"), 0o644))
	saved := goTest
	t.Cleanup(func() { goTest = saved })
	goTest = func(ctx context.Context, d string, args, env []string, stdout io.Writer) error {
		_, err := io.WriteString(stdout, "PASS\n")
		return err
	}
	err := runPeers(t.Context(), peersRun{dir: dir, scenarios: []string{"LockUnlock"}, ns: []int{1},
		benchtime: time.Second, stdout: io.Discard})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no result")
}

func TestPeerChartPath(t *testing.T) {
	assert.Equal(t, "out/latency-peers-Extend.png", peerChartPath("out/latency.png", "Extend"))
	assert.Equal(t, "chart-peers-Extend.png", peerChartPath("chart", "Extend"))
}

// TestBenchPeersEndToEnd runs redlock bench --peers for real: go test in
// the bench module of this checkout, on the servers the command started,
// one scenario at N=1, briefly.
func TestBenchPeersEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs the bench module")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	if findBenchDir() == "" {
		t.Skip("no bench module above the working directory")
	}
	out := filepath.Join(t.TempDir(), "latency.png")
	require.Equal(t, 0, bench([]string{"--duration", "50ms", "--nodes", "1", "--peers",
		"--peers-scenarios", "LockUnlock", "--out", out}))
	_, err := os.Stat(peerChartPath(out, "LockUnlock"))
	assert.NoError(t, err)
}
