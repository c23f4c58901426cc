package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// delayImpls are BenchmarkDelayLine's contenders, in the order each round
// runs them: the library's go-redis adapter (redlock), its rueidis
// adapter with rueidis's defaults and with MaxFlushDelay, and the peers.
// Ping is not a lock but one PING per operation, at one node and one
// goroutine only: the round trip the others' operations are made of.
var delayImpls = []Impl{Ping, Redlock, RedlockRueidis, RedlockRueidisFlush, RedsyncDefault, Redislock}

// Ping is the pseudo-contender of BenchmarkDelayLine that PINGs.
const Ping Impl = "ping"

// delayRoundEnv, when bench/delayline.sh sets it to a round's number k,
// rotates the order the contenders run in by k, so that no contender
// always runs first (or right after another) in its cell.
const delayRoundEnv = "REDLOCK_BENCH_ROUND"

// delayOrder is delayImpls rotated by the round in delayRoundEnv.
func delayOrder() []Impl {
	k, _ := strconv.Atoi(os.Getenv(delayRoundEnv))
	k = ((k % len(delayImpls)) + len(delayImpls)) % len(delayImpls)
	return append(slices.Clone(delayImpls[k:]), delayImpls[:k]...)
}

// delayNodes and delayGoroutines are BenchmarkDelayLine's node counts and
// goroutine counts.
var (
	delayNodes      = []int{1, 5}
	delayGoroutines = []int{1, parallelGoroutines}
)

// BenchmarkDelayLine is Lock+Unlock (one goroutine, and 32 each on a key
// of its own) at 1 and 5 nodes with a round trip of 0, 0.2 ms and 1 ms
// between the process and every node: at 0 straight to the servers, else
// through one delay line (delayline_test.go) with a listener per server,
// delaying each direction by half the round trip. Sub-benchmarks are
// named rtt=<rtt>/N=<nodes>/g=<goroutines>/impl=<contender>, and one
// invocation runs every contender of a cell one after the other on the
// same servers and delay line (in an order that bench/delayline.sh rotates
// from round to round, delayRoundEnv): the script runs it once per round
// and prints the table.
//
// The contenders share one go-redis client per node and round trip, with
// go-redis's defaults (as in the other scenarios): a pool of 10 per
// GOMAXPROCS, so on 2 cores 20 connections, fewer than 32 goroutines for
// the peers, which take a connection per command; the library's adapters
// batch concurrent commands (one batch in flight per node) and the
// rueidis ones pipeline over rueidis's own connection.
//
// Besides ns/op (and allocs), a cell with one goroutine reports p50-us
// and p99-us, the operations' latency; a cell behind a delay line
// reports what the delay line saw during the timed operations:
// dl-chunks/op (chunks it carried per operation, both directions and
// every node: what pipelining saves), dl-late-p99-us (how late the 99th
// percentile chunk left; 0 is on time) and dl-cpu-% (its CPU time over
// the wall time, of one core).
func BenchmarkDelayLine(b *testing.B) {
	bin := buildDelayLine(b)
	srvs := redistest.Start(b, delayNodes[len(delayNodes)-1]).Addrs()
	for _, rtt := range delayRTTs {
		b.Run(rttName(rtt), func(b *testing.B) {
			addrs := srvs
			var dl *delayLine
			if rtt > 0 {
				dl = startDelayLine(b, bin, rtt/2, srvs)
				addrs = dl.Addrs
			}
			clients := make([]*redis.Client, len(addrs))
			for i, a := range addrs {
				clients[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
				b.Cleanup(func() { clients[i].Close() })
			}
			for _, n := range delayNodes {
				for _, g := range delayGoroutines {
					for _, impl := range delayOrder() {
						if (impl == Redislock && n != 1) || (impl == Ping && (n != 1 || g != 1)) {
							continue
						}
						b.Run(fmt.Sprintf("N=%d/g=%d/impl=%s", n, g, impl), func(b *testing.B) {
							delayCell(b, dl, clients[:n], impl, g)
						})
					}
				}
			}
		})
	}
}

// delayCell is one sub-benchmark of BenchmarkDelayLine: b.N Lock+Unlock
// of impl over clients by g goroutines (dl nil: no delay line).
func delayCell(b *testing.B, dl *delayLine, clients []*redis.Client, impl Impl, g int) {
	ctx := context.Background()
	key := "dl:" + b.Name()
	var op func(k string) error
	if impl == Ping {
		op = func(string) error { return clients[0].Ping(ctx).Err() }
	} else {
		c, err := New(impl, clients)
		if err != nil {
			b.Fatal(err)
		}
		if cl, ok := c.(interface{ Close() }); ok {
			b.Cleanup(cl.Close)
		}
		op = func(k string) error {
			h, err := c.Acquire(ctx, k, false)
			if err != nil {
				return err
			}
			return h.Unlock(ctx)
		}
	}
	// Warm up with g goroutines at once, so that every connection the
	// contender opens under that concurrency is open before the timer.
	var wg sync.WaitGroup
	errs := make([]error, g)
	for i := range g {
		wg.Go(func() {
			for range 2 {
				errs[i] = errors.Join(errs[i], op(fmt.Sprintf("%s:%d", key, i)))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	var cpu0 float64
	if dl != nil {
		s, err := dl.stats() // and start its figures afresh
		if err != nil {
			b.Fatal(err)
		}
		cpu0 = s.cpu
	}
	b.ReportAllocs()
	t0 := time.Now()
	b.ResetTimer()
	if g == 1 {
		lat := make(latencies, 0, b.N)
		k := key + ":0"
		for range b.N {
			t := time.Now()
			if err := op(k); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		b.StopTimer()
		lat.report(b, "us", time.Microsecond)
	} else {
		var id atomic.Int64
		p, _ := parallelism()
		b.SetParallelism(p)
		b.RunParallel(func(pb *testing.PB) {
			k := fmt.Sprintf("%s:%d", key, id.Add(1)-1)
			for pb.Next() {
				if err := op(k); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
	}
	wall := time.Since(t0)
	if dl != nil {
		s, err := dl.stats()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(s.chunks)/float64(b.N), "dl-chunks/op")
		b.ReportMetric(s.lateP99, "dl-late-p99-us")
		b.ReportMetric(100*(s.cpu-cpu0)/wall.Seconds(), "dl-cpu-%")
	}
}
