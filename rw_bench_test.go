package redlock_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// BenchmarkSharedKeyParallel: 16 goroutines on ONE key, each holding it
// for 1 ms per operation, as readers (RLock) or through the mutex (Lock),
// at N=1 and N=5. Readers hold together; the mutex serializes them, so
// its ns/op is at least the 1 ms hold.
func BenchmarkSharedKeyParallel(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		if !strings.HasSuffix(b.Name(), "N=1") && !strings.HasSuffix(b.Name(), "N=5") {
			b.Skip("measured at N=1 and N=5")
		}
		rw := lk
		opts := []redlock.Option{redlock.WithStrategy(redlock.Retry(10000, 5*time.Millisecond))}
		for _, c := range []struct {
			name string
			lock func(context.Context, string, ...redlock.Option) (*redlock.Lock, error)
		}{{"readers", rw.RLock}, {"mutex", rw.Lock}} {
			b.Run(c.name, func(b *testing.B) {
				ctx := context.Background()
				key := "bench:" + b.Name()
				procs := runtime.GOMAXPROCS(0)
				b.SetParallelism((16 + procs - 1) / procs)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l, err := c.lock(ctx, key, opts...)
						if err != nil {
							b.Error(err)
							return
						}
						time.Sleep(time.Millisecond)
						if err := l.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	})
}
