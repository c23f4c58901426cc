package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Sub-benchmarks are named <Scenario>/N=<nodes>/impl=<contender>, and every
// scenario runs all contenders one after the other inside one invocation
// of the top-level benchmark, against the same servers. With -count k the
// contenders are therefore interleaved k times, and benchstat can compare
// them with -col /impl.

// maxNodes servers are started per top-level benchmark; N=n uses the first n.
const maxNodes = 7

var (
	nodeCounts  = []int{1, 3, 5, 7}
	uncontended = []Impl{Redlock, RedsyncDefault, Redislock, Raw}
	// lockUnlock adds this library on its rueidis adapter (rueidis
	// defaults, and with MaxFlushDelay), measured beside the go-redis one
	// (the contender "redlock") in the same rounds.
	lockUnlock     = append(slices.Clone(uncontended), RedlockRueidis, RedlockRueidisFlush)
	contended      = []Impl{Redlock, RedsyncDefault, Redsync1ms, Redislock, Raw}
	contendedNodes = []int{1, 5}
)

// AddrsEnv names the environment variable that points the benchmarks at
// existing masters (comma-separated host:port) instead of starting
// redis-server processes; N=n runs only when n masters are given.
// redlock bench --peers --addrs sets it.
const AddrsEnv = "REDLOCK_BENCH_ADDRS"

// servers starts maxNodes redis-server processes for one top-level
// benchmark (or takes the masters in AddrsEnv) and returns a go-redis
// client for each (go-redis defaults, except that context deadlines are
// honoured), shared by every contender.
func servers(b *testing.B) []*redis.Client {
	b.Helper()
	var addrs []string
	if env := os.Getenv(AddrsEnv); env != "" {
		for a := range strings.SplitSeq(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
	} else {
		addrs = redistest.Start(b, maxNodes).Addrs()
	}
	clients := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { clients[i].Close() })
	}
	return clients
}

// each runs scenario for every node count in ns and every contender in
// impls (skipping redislock beyond one node).
func each(b *testing.B, ns []int, impls []Impl, scenario func(b *testing.B, c Contender, key string)) {
	clients := servers(b)
	for _, n := range ns {
		if n > len(clients) {
			continue
		}
		for _, impl := range impls {
			if impl == Redislock && n != 1 {
				continue
			}
			b.Run(fmt.Sprintf("N=%d/impl=%s", n, impl), func(b *testing.B) {
				c, err := New(impl, clients[:n])
				if err != nil {
					b.Fatal(err)
				}
				if cl, ok := c.(interface{ Close() }); ok {
					b.Cleanup(cl.Close)
				}
				scenario(b, c, fmt.Sprintf("bench:%s:%s:%d", b.Name(), impl, n))
			})
		}
	}
}

// latencies records one duration per operation without allocating inside
// the timed loop, and reports p50 and p99 in microseconds.
type latencies []time.Duration

func (l latencies) report(b *testing.B, unit string, scale time.Duration) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	b.ReportMetric(float64(l[len(l)/2])/float64(scale), "p50-"+unit)
	b.ReportMetric(float64(l[(len(l)*99)/100])/float64(scale), "p99-"+unit)
}

// BenchmarkLockUnlock is one goroutine acquiring a free key and releasing
// it: the cost every critical section pays.
func BenchmarkLockUnlock(b *testing.B) {
	each(b, nodeCounts, lockUnlock, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		lat := make(latencies, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			h, err := c.Acquire(ctx, key, false)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		b.StopTimer()
		lat.report(b, "us", time.Microsecond)
	})
}

// parallelGoroutines is how many goroutines the parallel scenario runs,
// whatever GOMAXPROCS is.
const parallelGoroutines = 32

// BenchmarkLockUnlockParallel is 32 goroutines, each locking and unlocking
// its own key: throughput under concurrency, where per-node fan-out and
// connection use dominate.
func BenchmarkLockUnlockParallel(b *testing.B) {
	each(b, []int{1, 5}, lockUnlock, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		var id atomic.Int64
		b.SetParallelism((parallelGoroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			k := fmt.Sprintf("%s:%d", key, id.Add(1))
			for pb.Next() {
				h, err := c.Acquire(ctx, k, false)
				if err != nil {
					b.Error(err)
					return
				}
				if err := h.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkTryLockHeld is one attempt on a key someone else holds: the
// cost of being refused, which a Reject caller (an HTTP 409) pays.
func BenchmarkTryLockHeld(b *testing.B) {
	each(b, nodeCounts, uncontended, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		h, err := c.Acquire(ctx, key, false)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Unlock(ctx)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := c.Acquire(ctx, key, false); !errors.Is(err, ErrBusy) {
				b.Fatalf("a held key was not refused: %v", err)
			}
		}
	})
}

// BenchmarkExtend is one extension of a held lock to the full TTL.
func BenchmarkExtend(b *testing.B) {
	each(b, nodeCounts, uncontended, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		h, err := c.Acquire(ctx, key, false)
		if err != nil {
			b.Fatal(err)
		}
		defer h.Unlock(ctx)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if err := h.Extend(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkHandoff and BenchmarkHandoffProcs are in handoff_test.go.
