package backendtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/backendtest"
)

// The test of the test. A Run inside a test fails that test, which cannot
// be observed from inside it, so TestBrokenBackends runs each broken
// adapter's Run in a child process (this test binary, running only
// TestBrokenHelper) and checks from its exit status and verbose output
// that the suite failed, in the subtest and with the message that name
// the broken rule. The correct adapter behind the same wrapper must pass.

// brokenEnv, set to "1", makes TestBrokenHelper run.
const brokenEnv = "BACKENDTEST_BROKEN_HELPER"

// brokenCase is one adapter with one rule broken.
type brokenCase struct {
	name  string
	group string // the group of checks the child runs ("" for all)
	// fails are the checks that must fail, each with a substring of its message.
	fails map[string]string
}

var brokenCases = []brokenCase{
	{name: "release-ignores-token", group: "Release", fails: map[string]string{
		"WrongToken": "Release(announce=false) with a wrong token reported true",
		"Resent":     "a second Release with the first holder's token reported true",
	}},
	{name: "extend-recreates", group: "Extend", fails: map[string]string{
		"NeverRecreates": "Extend of an expired key reported true",
	}},
	{name: "fence-constant", group: "Fencer", fails: map[string]string{
		"Increasing":     "AcquireFenced must increment the key's counter",
		"SurvivesExpiry": "the counter must never expire or reset",
	}},
	{name: "fence-expires", group: "Fencer", fails: map[string]string{
		"SurvivesExpiry": "the counter must never expire or reset",
	}},
	{name: "raise-ignores-token", group: "Fencer", fails: map[string]string{
		"RaiseWrongToken": "RaiseFence with a wrong token reported true",
	}},
	{name: "acquire-reentrant", group: "Acquire", fails: map[string]string{
		"SameTokenWhileHeld": "Acquire with the token that already holds the key reported true",
	}},
	{name: "announce-always", group: "Notifier", fails: map[string]string{
		"UnannouncedRelease": "Release(announce=false) called released with its token",
	}},
	{name: "stop-keeps-calling", group: "Notifier", fails: map[string]string{
		"Stop": "released was called after stop returned",
	}},
	{name: "acquire-many-partial", group: "MultiLocker", fails: map[string]string{
		"AllOrNothing": "a refused AcquireMany left keys set",
	}},
	{name: "extend-many-partial", group: "MultiLocker", fails: map[string]string{
		"ExtendAllOrNothing": "a refused ExtendMany must change no key",
	}},
	{name: "reader-ignores-writer", group: "RWLocker", fails: map[string]string{
		"WriterPreference": "AcquireRead while a writer waits (its mark is set) reported true",
	}},
	{name: "peek-no-fence", group: "Peeker", fails: map[string]string{
		"Fence": "Peek must read the key's token and its fence counter",
	}},
	{name: "ignores-context", group: "Context", fails: map[string]string{
		"Canceled": "Acquire with a cancelled context returned error <nil>, want one matching context.Canceled",
		"Stall":    "Acquire with a 100ms deadline on a stalled node did not return within 2s",
	}},
}

// TestBrokenBackends checks that the suite fails each broken adapter
// where it should, and passes the correct one behind the same wrapper.
func TestBrokenBackends(t *testing.T) {
	if os.Getenv(brokenEnv) == "1" {
		t.Skip("in the child process")
	}
	t.Run("none", func(t *testing.T) {
		out, err := runBroken(t, "none", "")
		if err != nil || !strings.Contains(out, "--- PASS: TestBrokenHelper/none ") {
			t.Fatalf("the correct adapter behind the wrapper did not pass (%v):\n%s", err, out)
		}
	})
	for _, bc := range brokenCases {
		t.Run(bc.name, func(t *testing.T) {
			out, err := runBroken(t, bc.name, bc.group)
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite did not fail %s (%v):\n%s", bc.name, err, out)
			}
			for check, msg := range bc.fails {
				line := "--- FAIL: TestBrokenHelper/" + bc.name + "/" + bc.group + "/" + check + " "
				if !strings.Contains(out, line) {
					t.Errorf("%s: want %q in the output", bc.name, line)
				}
				if !strings.Contains(out, msg) {
					t.Errorf("%s: want the message %q in the output", bc.name, msg)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// runBroken runs TestBrokenHelper for one case (and one group of checks)
// in a child process and returns its output.
func runBroken(t *testing.T, name, group string) (string, error) {
	run := "^TestBrokenHelper$/^" + regexp.QuoteMeta(name) + "$"
	if group != "" {
		run += "/^" + group + "$"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBrokenHelper runs the suite against one broken adapter per subtest;
// only in the child process of TestBrokenBackends.
func TestBrokenHelper(t *testing.T) {
	if os.Getenv(brokenEnv) != "1" {
		t.Skip("runs only as TestBrokenBackends' child process")
	}
	names := []string{"none"}
	for _, bc := range brokenCases {
		names = append(names, bc.name)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) backendtest.Target {
				mt := openMini(t)
				w := &wrapper{kind: name, Backend: newBackend(mt.c), c: mt.c}
				t.Cleanup(w.stopAll)
				return mt.target(w)
			})
		})
	}
}

// wrapper passes every call to the correct adapter, except the one its
// kind breaks. It implements Fencer, Notifier, MultiLocker, Peeker and
// RWLocker (broken_rw_test.go), as the adapter does.
type wrapper struct {
	redlock.Backend
	kind string
	c    *redis.Client

	mu    sync.Mutex
	stops []func() // stop-keeps-calling: the real stops, called at cleanup
}

func (w *wrapper) fencer() redlock.Fencer     { return w.Backend.(redlock.Fencer) }
func (w *wrapper) notifier() redlock.Notifier { return w.Backend.(redlock.Notifier) }
func (w *wrapper) multi() redlock.MultiLocker { return w.Backend.(redlock.MultiLocker) }

func (w *wrapper) ctx(ctx context.Context) context.Context {
	if w.kind == "ignores-context" {
		return context.Background()
	}
	return ctx
}

func (w *wrapper) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	ok, err := w.Backend.Acquire(w.ctx(ctx), key, token, ttl)
	if w.kind == "acquire-reentrant" && err == nil && !ok {
		v, err := w.c.Get(ctx, key).Result()
		return v == token, ignoreNil(err)
	}
	return ok, err
}

func (w *wrapper) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	switch w.kind {
	case "release-ignores-token":
		n, err := w.c.Del(ctx, key).Result()
		return n == 1, err
	case "announce-always":
		announce = true
	}
	return w.Backend.Release(w.ctx(ctx), key, token, announce)
}

func (w *wrapper) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if w.kind == "extend-recreates" { // SET without XX: brings an expired key back
		v, err := w.c.Get(ctx, key).Result()
		if err = ignoreNil(err); err != nil || (v != "" && v != token) {
			return false, err
		}
		return true, w.c.Set(ctx, key, token, ttl).Err()
	}
	return w.Backend.Extend(w.ctx(ctx), key, token, ttl)
}

var fenceExpires = redis.NewScript(`
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	local n = redis.call("incr", KEYS[2])
	redis.call("pexpire", KEYS[2], ARGV[2])
	return n
end
return 0`)

func (w *wrapper) AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (bool, int64, error) {
	switch w.kind {
	case "fence-constant":
		ok, err := w.Backend.Acquire(ctx, key, token, ttl)
		return ok, 1, err
	case "fence-expires": // the counter expires with the key
		n, err := fenceExpires.Run(ctx, w.c, []string{key, key + ":fence"}, token, ttl.Milliseconds()).Int64()
		return n > 0, n, err
	}
	return w.fencer().AcquireFenced(w.ctx(ctx), key, token, ttl)
}

func (w *wrapper) RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error) {
	if w.kind == "raise-ignores-token" {
		v, err := w.c.Get(ctx, key).Result()
		if err = ignoreNil(err); err != nil || v == "" {
			return false, err
		}
		cur, err := w.c.Get(ctx, key+":fence").Int64()
		if err = ignoreNil(err); err != nil {
			return false, err
		}
		if cur < fence {
			err = w.c.Set(ctx, key+":fence", fence, 0).Err()
		}
		return err == nil, err
	}
	return w.fencer().RaiseFence(w.ctx(ctx), key, token, fence)
}

func (w *wrapper) Notify(ctx context.Context, key string, released func(string)) (func(), error) {
	stop, err := w.notifier().Notify(w.ctx(ctx), key, released)
	if w.kind != "stop-keeps-calling" || err != nil {
		return stop, err
	}
	w.mu.Lock()
	w.stops = append(w.stops, stop)
	w.mu.Unlock()
	return func() {}, nil
}

func (w *wrapper) Peek(ctx context.Context, key string) (string, int64, error) {
	if w.kind == "peek-no-fence" { // reads the token alone
		v, err := w.c.Get(ctx, key).Result()
		return v, 0, ignoreNil(err)
	}
	return w.Backend.(redlock.Peeker).Peek(w.ctx(ctx), key)
}

// stopAll calls the real stops that stop-keeps-calling withheld.
func (w *wrapper) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, stop := range w.stops {
		stop()
	}
	w.stops = nil
}

func ignoreNil(err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

func (w *wrapper) AcquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	if w.kind == "acquire-many-partial" { // key by key: stops at a held key, keeping the ones set
		for _, k := range keys {
			if ok, err := w.Backend.Acquire(ctx, k, token, ttl); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	}
	return w.multi().AcquireMany(w.ctx(ctx), keys, token, ttl)
}

func (w *wrapper) AcquireManyFenced(ctx context.Context, keys []string, token string, ttl time.Duration, fences []int64) (bool, error) {
	return w.multi().AcquireManyFenced(w.ctx(ctx), keys, token, ttl, fences)
}

func (w *wrapper) RaiseFences(ctx context.Context, keys []string, token string, fences []int64) (bool, error) {
	return w.multi().RaiseFences(w.ctx(ctx), keys, token, fences)
}

func (w *wrapper) ReleaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error) {
	return w.multi().ReleaseMany(w.ctx(ctx), keys, token, announce)
}

func (w *wrapper) ExtendMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	if w.kind == "extend-many-partial" { // key by key: extends the keys still held
		all := true
		for _, k := range keys {
			ok, err := w.Backend.Extend(ctx, k, token, ttl)
			if err != nil {
				return false, err
			}
			all = all && ok
		}
		return all, nil
	}
	return w.multi().ExtendMany(w.ctx(ctx), keys, token, ttl)
}
