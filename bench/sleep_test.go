package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Why a hold of time.Sleep(1ms) lasts longer in some processes than in
// others (hold-ms in the hand-off benchmarks).
//
// On Linux the Go runtime waits for its timers in epoll_wait, whose
// timeout is in whole milliseconds, and rounds a wait shorter than 1 ms
// up to 1 ms. A sleeping goroutine wakes on time when nothing else wakes
// its process meanwhile; when a packet arrives on any of the process's
// sockets during the sleep (even one no goroutine reads), epoll_wait
// returns early, and the runtime waits again for what is left, rounded
// up to 1 ms: the sleep overruns by up to a millisecond. So a process
// that receives pub/sub announcements while its worker holds the lock
// (standing subscriptions, goredis) sees its 1 ms holds last longer; the
// hand-off benchmarks measure the hold (hold-ms) and count it in their
// limit, and a critical section that waits for I/O rather than for a
// timer is woken by that I/O, not by a timer.
//
// BenchmarkSleep shows it without the library: time.Sleep(1ms), with no
// traffic, and with another process writing a byte to a socket of this
// one every 0.7 ms (sleepTrafficEnv, TestSleepTrafficWriter).
// It reports the sleep's p50 and p90 in µs.
const sleepTrafficEnv = "REDLOCK_BENCH_SLEEP_TRAFFIC" // the address the writer dials

func BenchmarkSleep(b *testing.B) {
	if os.Getenv(handoffChildEnv) != "" || os.Getenv(sleepTrafficEnv) != "" {
		b.Skip("a child process runs no benchmarks")
	}
	for _, traffic := range []bool{false, true} {
		b.Run(fmt.Sprintf("traffic=%v", traffic), func(b *testing.B) {
			if traffic {
				startTraffic(b)
			}
			d := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				time.Sleep(time.Millisecond)
				d = append(d, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2])/float64(time.Microsecond), "sleep-p50-us")
			b.ReportMetric(float64(d[len(d)*9/10])/float64(time.Microsecond), "sleep-p90-us")
		})
	}
}

// startTraffic starts the writer process and a goroutine that reads
// what it writes, both stopped by b's cleanup.
func startTraffic(b *testing.B) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestSleepTrafficWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), sleepTrafficEnv+"="+ln.Addr().String())
	if err := cmd.Start(); err != nil {
		cancel()
		b.Fatal(err)
	}
	conn, err := ln.Accept()
	if err != nil {
		cancel()
		_ = cmd.Wait()
		b.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 512)
		for {
			if _, err := conn.Read(buf); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() {
		cancel() // kills the writer; the reader then sees EOF
		_ = cmd.Wait()
		conn.Close()
		<-read
	})
}

// TestSleepTrafficWriter is BenchmarkSleep's writer process: it writes a
// byte to the benchmark's socket every 0.7 ms until the
// benchmark kills it, or for a minute.
func TestSleepTrafficWriter(t *testing.T) {
	addr := os.Getenv(sleepTrafficEnv)
	if addr == "" {
		t.Skip("started by BenchmarkSleep only")
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		if _, err := conn.Write([]byte{1}); err != nil {
			return
		}
		// The thread itself sleeps (nanosleep), so that the writes are
		// not held to the runtime's millisecond either.
		ts := syscall.NsecToTimespec(int64(700 * time.Microsecond))
		_ = syscall.Nanosleep(&ts, nil)
	}
}
