package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

// The library's primitives against the obvious composition of its mutexes
// they replace, this library only, on its go-redis adapter. Each scenario
// names its two arms with impl=, the primitive first:
//
//	Multi/N=n/impl=lockmany|mutexes     4 keys at once, one goroutine
//	Readers/N=n/impl=rlock|mutex        16 goroutines on one key, 1 ms hold
//	Semaphore/N=n/impl=semaphore|mutexes 4 permits, 8 goroutines, 1 ms hold
//
// ns/op is wall time per operation (all goroutines together), so ops/s is
// 1e9 / ns/op for either arm.

var primitiveNodes = []int{1, 5}

const (
	multiKeys        = 4
	readers          = 16
	semPermits       = 4
	semGoroutines    = 8
	primitiveHold    = time.Millisecond
	primitivePatient = 60 * time.Second
)

// primitiveWait is both arms' waiting strategy where they wait: the bench
// module's WaitStrategy, the library's Retry starting at 1 ms, called
// again when it gives up (as in Handoff).
var primitiveWait = WaitStrategy

// eachPrimitive runs arm for every N of primitiveNodes and every arm name,
// on a locker of this library over the first N servers (refusing by
// default, as the contender "redlock" is).
func eachPrimitive(b *testing.B, arms []string, arm func(b *testing.B, arm string, lk *redlock.Redlock, key string)) {
	clients := servers(b)
	for _, n := range primitiveNodes {
		if n > len(clients) {
			continue
		}
		for _, a := range arms {
			b.Run(fmt.Sprintf("N=%d/impl=%s", n, a), func(b *testing.B) {
				lk, err := primitiveLocker(clients[:n])
				if err != nil {
					b.Fatal(err)
				}
				arm(b, a, lk, fmt.Sprintf("bench:%s", b.Name()))
			})
		}
	}
}

func primitiveLocker(clients []*redis.Client) (*redlock.Redlock, error) {
	bs := make([]driver.Node, len(clients))
	for i, c := range clients {
		b, err := goredis.New(c)
		if err != nil {
			return nil, err
		}
		bs[i] = b
	}
	l, err := newLocker(bs)
	if err != nil {
		return nil, err
	}
	return l.l.(*redlock.Redlock), nil
}

// workers runs body in g goroutines until b.N operations are done in all,
// timing them together; body returns false to stop its goroutine (after
// reporting the error on b).
func workers(b *testing.B, g int, body func(ctx context.Context, w int) bool) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for w := range g {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), primitivePatient)
			defer cancel()
			for left.Add(-1) >= 0 {
				if !body(ctx, w) {
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
}

// lockWaiting calls lock until it acquires, calling again whenever its
// strategy gives up (ErrNotAcquired) while ctx lasts.
func lockWaiting(ctx context.Context, lock func(context.Context) (*redlock.Lock, error)) (*redlock.Lock, error) {
	for {
		l, err := lock(ctx)
		if err == nil || !errors.Is(err, redlock.ErrNotAcquired) || ctx.Err() != nil {
			return l, err
		}
	}
}

// BenchmarkMulti: one goroutine takes 4 free keys and releases them, with
// one LockMany (impl=lockmany) or with Lock on each key in sorted order,
// then Unlock of each (impl=mutexes): the composition that avoids
// deadlock between callers of overlapping sets.
func BenchmarkMulti(b *testing.B) {
	eachPrimitive(b, []string{"lockmany", "mutexes"}, func(b *testing.B, arm string, lk *redlock.Redlock, key string) {
		keys := make([]string, multiKeys)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s:%d", key, i)
		}
		slices.Sort(keys)
		ctx := context.Background()
		held := make([]*redlock.Lock, 0, multiKeys)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			switch arm {
			case "lockmany":
				l, err := lk.LockMany(ctx, keys)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			default:
				held = held[:0]
				for _, k := range keys {
					l, err := lk.Lock(ctx, k)
					if err != nil {
						b.Fatal(err)
					}
					held = append(held, l)
				}
				for _, l := range held {
					if err := l.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
}

// BenchmarkReaders: 16 goroutines on one key, each acquiring it, holding
// it 1 ms and releasing it, as readers (impl=rlock, they hold together)
// or through the mutex (impl=mutex: Lock with the waiting strategy and the
// library's hand-off, one holder at a time).
func BenchmarkReaders(b *testing.B) {
	eachPrimitive(b, []string{"rlock", "mutex"}, func(b *testing.B, arm string, lk *redlock.Redlock, key string) {
		rw := lk
		lock := rw.Lock
		if arm == "rlock" {
			lock = rw.RLock
		}
		opt := redlock.WithStrategy(primitiveWait)
		workers(b, readers, func(ctx context.Context, w int) bool {
			l, err := lockWaiting(ctx, func(ctx context.Context) (*redlock.Lock, error) { return lock(ctx, key, opt) })
			if err != nil {
				b.Errorf("reader %d: %v", w, err)
				return false
			}
			time.Sleep(primitiveHold)
			if err := l.Unlock(context.Background()); err != nil {
				b.Errorf("reader %d: unlock: %v", w, err)
				return false
			}
			return true
		})
	})
}

// BenchmarkSemaphore: 8 goroutines share 4 permits, each acquiring one,
// holding it 1 ms and releasing it, with a Semaphore (impl=semaphore,
// waiting with the strategy and hand-off) or with 4 mutex keys
// (impl=mutexes): one attempt on each in turn from a random start
// (Reject), and while all are held the same delays as the semaphore's
// strategy before going round again.
func BenchmarkSemaphore(b *testing.B) {
	eachPrimitive(b, []string{"semaphore", "mutexes"}, func(b *testing.B, arm string, lk *redlock.Redlock, key string) {
		opt := redlock.WithStrategy(primitiveWait)
		var acquire func(ctx context.Context) (*redlock.Lock, error)
		if arm == "semaphore" {
			sem, err := redlock.NewSemaphore(lk, key, semPermits)
			if err != nil {
				b.Fatal(err)
			}
			acquire = func(ctx context.Context) (*redlock.Lock, error) {
				return lockWaiting(ctx, func(ctx context.Context) (*redlock.Lock, error) { return sem.Acquire(ctx, opt) })
			}
		} else {
			keys := make([]string, semPermits)
			for i := range keys {
				keys[i] = fmt.Sprintf("%s:%d", key, i)
			}
			acquire = func(ctx context.Context) (*redlock.Lock, error) {
				return mutexPermit(ctx, lk, keys, primitiveWait)
			}
		}
		var inside atomic.Int32
		workers(b, semGoroutines, func(ctx context.Context, w int) bool {
			l, err := acquire(ctx)
			if err != nil {
				b.Errorf("worker %d: %v", w, err)
				return false
			}
			if inside.Add(1) > semPermits {
				b.Errorf("more than %d holders at once", semPermits)
			}
			time.Sleep(primitiveHold)
			inside.Add(-1)
			if err := l.Unlock(context.Background()); err != nil {
				b.Errorf("worker %d: unlock: %v", w, err)
				return false
			}
			return true
		})
	})
}

// mutexPermit is the composition a semaphore replaces: one Reject attempt
// on each key in turn from a random start, and while every key is held,
// strategy's delays between rounds (starting over when it gives up),
// until one is granted or ctx ends.
func mutexPermit(ctx context.Context, lk redlock.Locker, keys []string, strategy redlock.Strategy) (*redlock.Lock, error) {
	start := rand.IntN(len(keys))
	for retry := 0; ; retry++ {
		for i := range keys {
			l, err := lk.Lock(ctx, keys[(start+i)%len(keys)])
			if err == nil || !errors.Is(err, redlock.ErrNotAcquired) {
				return l, err
			}
		}
		d, ok := strategy.Backoff(retry)
		if !ok {
			retry, d = -1, 0
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
