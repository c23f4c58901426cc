package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// What a hand-off's release costs the node itself, apart from the round
// trip: the server time of the release script, by INFO commandstats (its
// usec, which counts the script's execution, not the network), run as a
// hand-off runs it, after the node idled for a hold (1 ms), and back to
// back for comparison. On a virtual machine whose idle CPUs sleep, a
// script run after an idle spell takes twice or three times as long as
// the same script run hot: its code and data left the caches.
//
// BenchmarkReleaseScript's scripts, each on one node:
//
//   - release-fair: the library's fair release (release_fair.lua) of the
//     queue's head's holder, which grants the key to the next entry and
//     announces it, the release of every cross-process hand-off; the next
//     entry queues (acquire_fair.lua) before the idle spell, as the next
//     waiter does during the hold;
//   - release: the library's plain release (release.lua), announced;
//   - ideal-pass: ideal-handoff's SET and PUBLISH (idealPass), the least
//     a hand-off in one round asks of a node.
//
// It reports server-us, the script's mean server time per call (the
// benchmark's ns/op is mostly the idle spell and the round trips).
func BenchmarkReleaseScript(b *testing.B) {
	if os.Getenv(handoffChildEnv) != "" {
		b.Skip("a hand-off worker process runs no benchmarks")
	}
	c := servers(b)[0]
	for _, idle := range []time.Duration{handoffHold, 0} {
		for _, s := range []string{"release-fair", "release", "ideal-pass"} {
			b.Run(fmt.Sprintf("script=%s/idle=%v", s, idle), func(b *testing.B) {
				run := releaseScripts(b, c, s, b.Name())
				var usec int64
				for range b.N {
					next := run.prepare()
					time.Sleep(idle)
					before := redistest.CommandStats(b, c)["evalsha"].Usec
					run.release(next)
					usec += redistest.CommandStats(b, c)["evalsha"].Usec - before
				}
				b.ReportMetric(float64(usec)/float64(b.N), "server-us")
			})
		}
	}
}

// scriptRun is one of BenchmarkReleaseScript's scripts on a key of its
// own: prepare sets up a release (a held key, and for release-fair the
// next waiter's queue entry) and returns what release needs.
type scriptRun struct {
	prepare func() int
	release func(int)
}

func releaseScripts(b *testing.B, c *redis.Client, script, key string) scriptRun {
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	load := func(src string) string {
		sha, err := c.ScriptLoad(ctx, src).Result()
		must(err)
		return sha
	}
	keys := []string{key}
	tok := func(i int) string { return fmt.Sprintf("%032x", i) }
	switch script {
	case "release-fair":
		acq, rel := load(coreScript(b, "fence_lib.lua")+coreScript(b, "acquire_fair.lua")), load(coreScript(b, "release_fair.lua"))
		fair := []string{key, key + ":queue", key + ":queue:exp", key + ":queue:grant"}
		must(c.Del(ctx, fair...).Err())
		ticket := func(i int) string { return "bench." + strconv.Itoa(i) }
		queue := func(i int) int64 { // ticket i's attempt: 1 if it took the key
			n, err := c.EvalSha(ctx, acq, fair, tok(i), TTL.Milliseconds(), ticket(i), i, TTL.Milliseconds(), 1).Int64()
			must(err)
			return n
		}
		if queue(0) != 1 {
			b.Fatal("release-fair: the first entry did not take the free key")
		}
		i := 0
		return scriptRun{
			prepare: func() int { i++; queue(i); return i },
			release: func(next int) {
				if n, err := c.EvalSha(ctx, rel, fair, tok(next-1), "1", ticket(next-1), "1").Int(); err != nil || n != 1 {
					b.Fatalf("release-fair: %v, %v; want 1 (the holder's release)", n, err)
				}
			},
		}
	case "release":
		rel := load(coreScript(b, "release.lua"))
		i := 0
		return scriptRun{
			prepare: func() int { i++; must(c.Set(ctx, key, tok(i), TTL).Err()); return i },
			release: func(i int) {
				if n, err := c.EvalSha(ctx, rel, keys, tok(i), "1").Int(); err != nil || n != 1 {
					b.Fatalf("release: %v, %v; want 1", n, err)
				}
			},
		}
	default:
		pass := load(idealPass)
		i := 0
		return scriptRun{
			prepare: func() int { i++; return i },
			release: func(i int) {
				must(c.EvalSha(ctx, pass, keys, tok(i), TTL.Milliseconds(), key+":ideal").Err())
			},
		}
	}
}

// coreScript reads one of the core's scripts from the repository, as the
// core embeds it (the bench module lives in the repository).
func coreScript(b *testing.B, name string) string {
	src, err := os.ReadFile("../" + name)
	if err != nil {
		b.Fatal(err)
	}
	return string(src)
}
