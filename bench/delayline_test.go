package bench

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// A delay line puts a round trip between the benchmarks and their
// redis-servers without kernel traffic shaping: delayline/delayline.c, a
// TCP proxy that writes every chunk it reads to the other side a fixed
// time after it arrived (its comment says exactly what it guarantees).
// The tests compile it with the system's C compiler into their temporary
// directory, and start one process per set of servers, with one listener
// per server, stopped when the test or benchmark ends.

//go:embed delayline/delayline.c
var delayLineSource []byte

// buildDelayLine compiles delayline.c into tb's temporary directory and
// returns the executable's path. Without a C compiler tb is skipped, or
// failed when REDLOCK_REQUIRE_REDIS=1 (the variable that requires the
// real servers these measurements need too).
func buildDelayLine(tb testing.TB) string {
	tb.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			testenv.SkipOrFail(tb, testenv.Redis, "delayline: no C compiler (gcc or cc) on PATH; install one (Debian: apt-get install gcc)")
		}
	}
	dir := tb.TempDir()
	src, bin := filepath.Join(dir, "delayline.c"), filepath.Join(dir, "delayline")
	if err := os.WriteFile(src, delayLineSource, 0o600); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-Wall", "-o", bin, src).CombinedOutput(); err != nil {
		tb.Fatalf("delayline: %s: %v\n%s", cc, err, out)
	}
	return bin
}

// delayLine is one running delayline process.
type delayLine struct {
	cmd   *exec.Cmd
	ctl   io.WriteCloser // its stdin: a line asks for statistics, EOF stops it
	out   *bufio.Reader  // its stdout
	Addrs []string       // one listener per upstream, in order
}

// startDelayLine starts bin in front of upstreams, delaying each direction
// by oneWay (a round trip by 2*oneWay), and stops it when tb ends. It
// asks for SCHED_FIFO (-r), which it gets where the process may.
func startDelayLine(tb testing.TB, bin string, oneWay time.Duration, upstreams []string) *delayLine {
	tb.Helper()
	us := strconv.FormatFloat(float64(oneWay)/float64(time.Microsecond), 'f', 3, 64)
	cmd := exec.Command(bin, append([]string{"-r", us}, upstreams...)...)
	cmd.Stderr = os.Stderr
	// It exits when its stdin closes, which covers a parent that dies;
	// Pdeathsig is the second belt.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctl, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	d := &delayLine{cmd: cmd, ctl: ctl, out: bufio.NewReader(out)}
	tb.Cleanup(d.close)
	for {
		l, err := d.out.ReadString('\n')
		if err != nil {
			tb.Fatalf("delayline: reading its addresses: %v", err)
		}
		if l = strings.TrimSpace(l); l == "ready" {
			break
		}
		d.Addrs = append(d.Addrs, l)
	}
	if len(d.Addrs) != len(upstreams) {
		tb.Fatalf("delayline: %d addresses for %d upstreams", len(d.Addrs), len(upstreams))
	}
	return d
}

// close closes its stdin, which makes it exit, and waits for it; one that
// has not exited within a second is killed by its PID.
func (d *delayLine) close() {
	d.ctl.Close()
	done := make(chan struct{})
	go func() {
		_ = d.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

// delayStats is what the delay line reports since the previous report.
type delayStats struct {
	chunks                    int
	lateP50, lateP99, lateMax float64 // µs a chunk left after it was due
	lagMean                   float64 // µs a chunk was read after it arrived
	advance                   float64 // µs the timer is set before a chunk is due
	cpu                       float64 // the process's CPU seconds since it started
	realtime                  bool    // it runs SCHED_FIFO
}

func (d *delayLine) stats() (delayStats, error) {
	var s delayStats
	if _, err := io.WriteString(d.ctl, "stats\n"); err != nil {
		return s, err
	}
	l, err := d.out.ReadString('\n')
	if err != nil {
		return s, err
	}
	for f := range strings.FieldsSeq(l) {
		k, v, _ := strings.Cut(f, "=")
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return s, fmt.Errorf("delayline: stats %q: %w", l, err)
		}
		switch k {
		case "chunks":
			s.chunks = int(x)
		case "late_p50_us":
			s.lateP50 = x
		case "late_p99_us":
			s.lateP99 = x
		case "late_max_us":
			s.lateMax = x
		case "lag_mean_us":
			s.lagMean = x
		case "advance_us":
			s.advance = x
		case "cpu_s":
			s.cpu = x
		case "rt":
			s.realtime = x == 1
		}
	}
	return s, nil
}

// delayRTTs are the round trips the delay-line measurements run at: 0 is
// straight to the servers, the others through a delay line of half the
// round trip each way.
var delayRTTs = []time.Duration{0, 200 * time.Microsecond, time.Millisecond}

// rttName is how a round trip appears in a sub-benchmark's name and the
// test's log: rtt=0ms, rtt=0.2ms, rtt=1ms.
func rttName(rtt time.Duration) string {
	return "rtt=" + strconv.FormatFloat(float64(rtt)/float64(time.Millisecond), 'f', -1, 64) + "ms"
}

// pings sends n PINGs through c one at a time and returns each one's
// round trip, sorted.
func pings(ctx context.Context, c *redis.Client, n int) ([]time.Duration, error) {
	d := make([]time.Duration, n)
	for i := range d {
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		d[i] = time.Since(t0)
	}
	slices.Sort(d)
	return d, nil
}

// A PING's median round trip through the delay line may exceed its
// target and the direct round trip (25 to 80 µs on the virtual machines
// this ran on) by the proxy's two extra loopback hops and, above all, the
// wake-ups of the server and the client after they idled for half the
// round trip: a virtual CPU idle for more than about 0.2 ms takes 20 to
// 50 µs longer to wake, as it would behind a real network. Medians
// exceeded target plus direct round trip by 40 to 230 µs. The test bounds
// the excess at half the target: loose for a measure (the runs report the
// real round trip), tight enough to catch a delay applied twice.

// delayLineLate bounds how late the delay line's median chunk may leave:
// its own precision, which the test checks apart from the round trip's
// (0 to 14 µs seen; Go's timers are late by a millisecond).
const delayLineLate = 50 // µs

// TestDelayLineRTT measures what round trip the delay line really gives:
// 1000 PINGs with go-redis, one at a time, to a redis-server directly
// and through a delay line at each of delayRTTs, and their p50 and p90.
// It fails when a median falls outside [target, 1.5 target + the direct
// round trip],
// or when the delay line's median chunk left more than delayLineLate µs
// after it was due, so that the tool cannot degrade unnoticed.
// bench/delayline.sh keeps its log (-v) with the results.
func TestDelayLineRTT(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: takes about 2 s")
	}
	bin := buildDelayLine(t)
	srv := redistest.Start(t, 1).Addrs()[0]
	var direct time.Duration // the round trip without the delay line (delayRTTs[0] is 0)
	for _, rtt := range delayRTTs {
		addr := srv
		var dl *delayLine
		if rtt > 0 {
			dl = startDelayLine(t, bin, rtt/2, []string{srv})
			addr = dl.Addrs[0]
		}
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		ctx := t.Context()
		if _, err := pings(ctx, c, 100); err != nil { // dial, warm up
			t.Fatal(err)
		}
		if dl != nil {
			if _, err := dl.stats(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := pings(ctx, c, 1000)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		p50, p90 := d[len(d)/2], d[len(d)*9/10]
		late := 0.0
		line := fmt.Sprintf("%s: PING round trip p50 %.0f µs, p90 %.0f µs (1000 PINGs)", rttName(rtt), us(p50), us(p90))
		if dl != nil {
			s, err := dl.stats()
			if err != nil {
				t.Fatal(err)
			}
			line += fmt.Sprintf("; delay line: %d chunks, late p50 %.0f µs, p99 %.0f µs, max %.0f µs; read %.0f µs after arrival on average; timer %.0f µs early; SCHED_FIFO %v",
				s.chunks, s.lateP50, s.lateP99, s.lateMax, s.lagMean, s.advance, s.realtime)
			late = s.lateP50
		}
		t.Log(line)
		if rtt == 0 {
			direct = p50
		}
		if high := rtt + rtt/2 + direct; rtt > 0 && (p50 < rtt || p50 > high) {
			t.Errorf("%s: PING p50 %v, want within [%v, %v] (the direct round trip is %v)", rttName(rtt), p50, rtt, high, direct)
		}
		if late > delayLineLate {
			t.Errorf("%s: the delay line's median chunk left %.0f µs late, want at most %d", rttName(rtt), late, delayLineLate)
		}
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
