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
	nodeCounts = []int{1, 3, 5, 7}
	// uncontended adds this library on its rueidis adapter (rueidis
	// defaults) beside the go-redis one (the contender "redlock"), for
	// information: the targets are judged on the go-redis adapter.
	uncontended = []Impl{Redlock, RedlockRueidis, RedsyncDefault, Redislock, Raw}
	// lockUnlock adds rueidis with MaxFlushDelay too.
	lockUnlock     = append(slices.Clone(uncontended), RedlockRueidisFlush)
	contended      = []Impl{Redlock, RedlockFair, RedsyncDefault, Redsync1ms, Redislock, Raw, IdealHandoff, IdealQueued}
	contendedNodes = []int{1, 5}
)

// AddrsEnv names the environment variable that points the benchmarks at
// existing masters (comma-separated host:port) instead of starting
// redis-server processes; N=n runs only when n masters are given.
// redlock bench --peers sets it (to --addrs, or to the servers it started).
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

// parallelism is the b.SetParallelism that makes RunParallel start at
// least parallelGoroutines goroutines, and how many it starts.
func parallelism() (p, goroutines int) {
	procs := runtime.GOMAXPROCS(0)
	p = (parallelGoroutines + procs - 1) / procs
	return p, p * procs
}

// BenchmarkLockUnlockParallel is 32 goroutines, each locking and unlocking
// its own key: throughput under concurrency, where per-node fan-out and
// connection use dominate.
func BenchmarkLockUnlockParallel(b *testing.B) {
	each(b, nodeCounts, lockUnlock, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		var id atomic.Int64
		p, _ := parallelism()
		b.SetParallelism(p)
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

// holdKeys acquires n keys key:0 … key:n-1 with c, before the timer
// starts, and releases them when b ends.
func holdKeys(b *testing.B, c Contender, key string, n int) []Held {
	b.Helper()
	ctx := context.Background()
	hs := make([]Held, n)
	for i := range hs {
		h, err := c.Acquire(ctx, fmt.Sprintf("%s:%d", key, i), false)
		if err != nil {
			b.Fatal(err)
		}
		hs[i] = h
	}
	b.Cleanup(func() {
		for _, h := range hs {
			_ = h.Unlock(ctx)
		}
	})
	return hs
}

// BenchmarkTryLockHeldParallel is 32 goroutines each making one attempt
// after another on a key held by someone else: the refusal path under
// load (a busy HTTP service answering 409s). Each goroutine has a held
// key of its own, as in the other parallel scenarios, so the three differ
// only in the operation; one shared key would measure the same server
// work (Redis serves one key as fast as 32), but would let a library that
// keeps per-key state in the process (this one's line of waiters, for
// instance) serialize its callers on it, which is not what a refusal of
// unrelated requests costs.
func BenchmarkTryLockHeldParallel(b *testing.B) {
	each(b, nodeCounts, uncontended, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		p, goroutines := parallelism()
		holdKeys(b, c, key, goroutines)
		var id atomic.Int64
		b.SetParallelism(p)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			k := fmt.Sprintf("%s:%d", key, id.Add(1)-1)
			for pb.Next() {
				if _, err := c.Acquire(ctx, k, false); !errors.Is(err, ErrBusy) {
					b.Errorf("a held key was not refused: %v", err)
					return
				}
			}
		})
	})
}

// BenchmarkExtendParallel is 32 goroutines each extending a lock of its
// own, held from before the timer starts.
func BenchmarkExtendParallel(b *testing.B) {
	each(b, nodeCounts, uncontended, func(b *testing.B, c Contender, key string) {
		ctx := context.Background()
		p, goroutines := parallelism()
		hs := holdKeys(b, c, key, goroutines)
		var id atomic.Int64
		b.SetParallelism(p)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			h := hs[id.Add(1)-1]
			for pb.Next() {
				if err := h.Extend(ctx); err != nil {
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
