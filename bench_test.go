package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/driver"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
)

// The hot-path benchmarks: this library alone, on real redis-server
// processes, for profiling (go test -run '^$' -bench LockUnlock/N=5
// -cpuprofile cpu.out -memprofile mem.out). The side-by-side comparison
// with redsync, redislock and the raw floor is in the bench/ module; see
// BENCHMARKS.md.

var benchNodeCounts = []int{1, 3, 5, 7}

// benchLockers starts 7 servers and calls f with a locker over the first n
// for every n in benchNodeCounts: Single for one node, Redlock otherwise.
func benchLockers(b *testing.B, f func(b *testing.B, lk *redlock.Redlock)) {
	c := redistest.Start(b, 7)
	bs := make([]driver.Node, len(c.Servers))
	for i, addr := range c.Addrs() {
		bs[i] = node(b, redistest.Client(b, addr))
	}
	for _, n := range benchNodeCounts {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			opts := []redlock.Option{redlock.WithTTL(10 * time.Second), redlock.WithStrategy(redlock.Reject())}
			lk, err := redlock.New(bs[:n], opts...)
			if err != nil {
				b.Fatal(err)
			}
			f(b, lk)
		})
	}
}

func BenchmarkLockUnlock(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		ctx := context.Background()
		key := "bench:" + b.Name()
		b.ReportAllocs()
		for b.Loop() {
			l, err := lk.Lock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFencedLockUnlock is BenchmarkLockUnlock WithFencing: each
// acquisition takes a fencing token (and a second round when the nodes'
// counters disagree).
func BenchmarkFencedLockUnlock(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		ctx := context.Background()
		key := "bench:" + b.Name()
		b.ReportAllocs()
		for b.Loop() {
			l, err := lk.Lock(ctx, key, redlock.WithFencing())
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLockUnlockParallel runs 32 goroutines, each on its own key.
func BenchmarkLockUnlockParallel(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		ctx := context.Background()
		var id atomic.Int64
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((32 + procs - 1) / procs)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("bench:%s:%d", b.Name(), id.Add(1))
			for pb.Next() {
				l, err := lk.Lock(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkTryLockHeld is a Reject attempt on a held key.
func BenchmarkTryLockHeld(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		ctx := context.Background()
		key := "bench:" + b.Name()
		held, err := lk.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		defer held.Unlock(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lk.Lock(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
				b.Fatalf("a held key was not refused: %v", err)
			}
		}
	})
}

func BenchmarkExtend(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		ctx := context.Background()
		l, err := lk.Lock(ctx, "bench:"+b.Name())
		if err != nil {
			b.Fatal(err)
		}
		defer l.Unlock(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Extend(ctx, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
}
