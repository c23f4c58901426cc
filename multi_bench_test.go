package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/quorumlock/redlock"
)

// BenchmarkLockManyUnlock takes and releases a set of 1, 4 and 16 keys,
// beside BenchmarkLockUnlock's single key (N=1 and 5 only).
func BenchmarkLockManyUnlock(b *testing.B) {
	benchLockers(b, func(b *testing.B, lk *redlock.Redlock) {
		if !strings.HasSuffix(b.Name(), "N=1") && !strings.HasSuffix(b.Name(), "N=5") {
			b.Skip("sets are measured at N=1 and N=5")
		}
		ml := lk
		for _, size := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("keys=%d", size), func(b *testing.B) {
				keys := make([]string, size)
				for i := range keys {
					keys[i] = fmt.Sprintf("bench:%s:%d", b.Name(), i)
				}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					l, err := ml.LockMany(ctx, keys)
					if err != nil {
						b.Fatal(err)
					}
					if err := l.Unlock(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
}
