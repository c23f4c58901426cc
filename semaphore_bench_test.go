package redlock_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// The semaphore's costs beside the mutex's (bench_test.go), on the same
// redis-server processes: a permit taken and released with every slot
// free, with all slots but one held (an Acquire goes round until it finds
// the free one), and under contention (32 goroutines, 4 permits).

const benchPermits = 4

func benchSemaphore(b *testing.B, lk *redlock.Redlock) *redlock.Semaphore {
	sem, err := redlock.NewSemaphore(lk, "bench:"+b.Name(), benchPermits)
	if err != nil {
		b.Fatal(err)
	}
	return sem
}

// acquireRelease takes a permit of sem and gives it back, or fails b.
func acquireRelease(b *testing.B, ctx context.Context, sem *redlock.Semaphore, opts ...redlock.Option) bool {
	l, err := sem.Acquire(ctx, opts...)
	if err == nil {
		err = l.Unlock(ctx)
	}
	if err != nil {
		b.Error(err)
		return false
	}
	return true
}

func BenchmarkSemaphoreAcquireRelease(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		sem := benchSemaphore(b, lk)
		b.ReportAllocs()
		for b.Loop() {
			if !acquireRelease(b, context.Background(), sem) {
				return
			}
		}
	})
}

// BenchmarkSemaphoreLastPermit: three of four permits are held.
func BenchmarkSemaphoreLastPermit(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		ctx := context.Background()
		sem := benchSemaphore(b, lk)
		for range benchPermits - 1 {
			l, err := sem.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Unlock(ctx)
		}
		b.ReportAllocs()
		for b.Loop() {
			if !acquireRelease(b, ctx, sem) {
				return
			}
		}
	})
}

// BenchmarkSemaphoreContended: 32 goroutines share 4 permits, waiting
// with hand-off (Retry) for one to be released.
func BenchmarkSemaphoreContended(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		sem := benchSemaphore(b, lk)
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((32 + procs - 1) / procs)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !acquireRelease(b, context.Background(), sem, redlock.WithStrategy(redlock.Retry(30, 50*time.Millisecond))) {
					return
				}
			}
		})
	})
}
