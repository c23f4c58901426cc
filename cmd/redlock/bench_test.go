package main

import (
	"context"
	"image/color"
	"image/png"
	"net"
	"os"
	"path/filepath"
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
		assert.Equal(t, 2, bench(args), "bench %v", args)
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
	seen := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
		}
	}
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
	err := runPeers(context.Background(), t.TempDir(), "x", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not the bench module")
}
