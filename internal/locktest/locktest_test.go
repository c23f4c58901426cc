package locktest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/redistest"
)

// recorder is a testing.TB that keeps failures instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func single(t *testing.T, grantAlways bool) *redlock.Redlock {
	b, err := goredis.New(redistest.Client(t, miniredis.RunT(t).Addr()))
	if err != nil {
		t.Fatal(err)
	}
	n := fakenode.Wrap(b)
	if grantAlways { // a broken node: SET without NX
		n.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
			if c.Op == fakenode.Acquire {
				return fakenode.Result{Reply: int64(1)}
			}
			return c.Send(ctx)
		})
	}
	s, err := redlock.NewSingle(fakenode.Silent(n), redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Retry(30, time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCounterPassesAGoodLock and TestCounterFailsABrokenOne: the check
// can fail.
func TestCounterPassesAGoodLock(t *testing.T) {
	Counter(t, single(t, false), "k", 4, 10, nil)
}

func TestCounterFailsABrokenOne(t *testing.T) {
	lk := single(t, true)
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Counter(r, lk, "k", 4, 10, nil)
	}()
	<-done
	if len(r.failed) == 0 {
		t.Fatal("Counter passed a lock that lets every caller in")
	}
}

// TestPermitsPassesAGoodSemaphore and TestPermitsFailsABrokenOne: the
// bound check can fail.
func TestPermitsPassesAGoodSemaphore(t *testing.T) {
	sem, err := redlock.NewSemaphore(single(t, false), "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	Permits(t, sem, 6, 10, nil)
}

func TestPermitsFailsABrokenOne(t *testing.T) {
	sem, err := redlock.NewSemaphore(single(t, true), "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Permits(r, sem, 6, 10, nil)
	}()
	<-done
	if len(r.failed) == 0 {
		t.Fatal("Permits passed a semaphore that lets every caller in")
	}
}
