package goredis

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/badnode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/respguard"
)

// FuzzNodeReplies has a node answer every script call with the fuzzer's
// bytes: a Single's Lock, LockMany and RLock over it never panic, return
// within a bound, and grant a lock only when the bytes hold an integer
// reply (the scripts' grant). One server, whose answer is swapped per
// input, and one client serve every input.
func FuzzNodeReplies(f *testing.F) {
	for _, s := range badnode.Shapes() {
		f.Add(s.Bytes())
	}
	for _, valid := range []string{":1\r\n", ":0\r\n", ":-1\r\n", "$-1\r\n", "*-1\r\n", "*2\r\n:1\r\n:5\r\n", "*0\r\n",
		"-ERR nope\r\n", "-NOSCRIPT No matching script\r\n", "|1\r\n+a\r\n+b\r\n:1\r\n", ">2\r\n+x\r\n+y\r\n:1\r\n"} {
		f.Add([]byte(valid))
	}
	bad := badnode.Start(f, badnode.Silence)
	c := redistest.Client(f, bad.Addr())
	node := adapt(f, c) // before the first connection: every one is guarded
	if err := c.Ping(f.Context()).Err(); err != nil {
		f.Fatal(err)
	}
	r := newSingle(f, node, redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithStrategy(redlock.Reject()))
	ops := []struct {
		name string
		lock func(ctx context.Context, key string) (*redlock.Lock, error)
	}{
		{"Lock", func(ctx context.Context, key string) (*redlock.Lock, error) { return r.Lock(ctx, key) }},
		{"LockMany", func(ctx context.Context, key string) (*redlock.Lock, error) {
			return r.LockMany(ctx, []string{key + ":a", key + ":b"})
		}},
		{"RLock", func(ctx context.Context, key string) (*redlock.Lock, error) { return r.RLock(ctx, key) }},
	}
	const bound = 2 * time.Second // a call is a round and a rollback, 50 ms each at most
	f.Fuzz(func(t *testing.T, reply []byte) {
		if n, ok := allocates(reply); ok {
			t.Skipf("a length of %d: within what Redis sends, which go-redis allocates; it only slows the fuzzer", n)
		}
		bad.Answer(reply)
		for _, op := range ops {
			type result struct {
				lock *redlock.Lock
				err  error
			}
			done := make(chan result, 1)
			go func() {
				l, err := op.lock(t.Context(), fresh("fuzz"))
				done <- result{l, err}
			}()
			var got result
			select {
			case got = <-done:
			case <-time.After(bound):
				t.Fatalf("%s on a node answering %q did not return within %v", op.name, reply, bound)
			}
			if got.err == nil {
				if got.lock == nil {
					t.Fatalf("%s on a node answering %q: neither a lock nor an error", op.name, reply)
				}
				if !bytes.Contains(reply, []byte(":")) {
					t.Fatalf("%s on a node answering %q granted a lock without an integer reply", op.name, reply)
				}
				_ = got.lock.Unlock(context.Background())
			}
		}
	})
}

// allocates finds a number in reply that go-redis would take for a length
// and allocate, more than a MiB and no more than the guard lets through
// (512 MiB: Redis's own bound on a string). Beyond, the guard refuses the
// length before go-redis reads it: those inputs are fuzzed, and before
// the guard they ended the process ("fatal error: runtime: out of
// memory", which no recover catches).
func allocates(reply []byte) (int64, bool) {
	for i := 0; i < len(reply); {
		if reply[i] < '0' || reply[i] > '9' {
			i++
			continue
		}
		var n int64
		for ; i < len(reply) && reply[i] >= '0' && reply[i] <= '9'; i++ {
			if n < 1<<48 {
				n = n*10 + int64(reply[i]-'0')
			}
		}
		if n > 1<<20 && n <= respguard.Default.MaxBulk {
			return n, true
		}
	}
	return 0, false
}
