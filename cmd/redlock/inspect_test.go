package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// entry is the in-process form of inspect and release.
type entry func(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int

// callT runs a subcommand in-process with no environment, returning its
// status and what it wrote.
func callT(t *testing.T, f entry, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	status = f(t.Context(), args, &out, &errb, func(string) (string, bool) { return "", false })
	return status, out.String(), errb.String()
}

// masters starts n redis-servers and returns them, their --addrs and a
// client for each.
func masters(t *testing.T, n int) (*redisserver.Cluster, string, []*redis.Client) {
	t.Helper()
	c := redistest.Start(t, n)
	var cs []*redis.Client
	for _, a := range c.Addrs() {
		cs = append(cs, redistest.Client(t, a))
	}
	return c, strings.Join(c.Addrs(), ","), cs
}

// lockOn takes key with the library over the clients: a Single over one,
// a Redlock over several, with fencing.
func lockOn(t *testing.T, cs []*redis.Client, key string) *redlock.Lock {
	t.Helper()
	var bs []driver.Node
	for _, c := range cs {
		bs = append(bs, adapt(t, c))
	}
	opts := []redlock.Option{redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithStrategy(redlock.Reject())}
	var (
		l   redlock.Locker
		err error
	)
	if len(bs) == 1 {
		l, err = redlock.NewSingle(bs[0], opts...)
	} else {
		l, err = redlock.New(bs, opts...)
	}
	require.NoError(t, err)
	lk, err := l.Lock(t.Context(), key)
	require.NoError(t, err)
	return lk
}

// setOn sets key to token by hand on the given clients, as a lock would.
func setOn(t *testing.T, cs []*redis.Client, key, token string) {
	t.Helper()
	for _, c := range cs {
		require.NoError(t, c.Set(t.Context(), key, token, time.Minute).Err())
	}
}

// inspectJSON runs inspect --json and parses its one report.
func inspectJSON(t *testing.T, args ...string) (int, inspectReport) {
	t.Helper()
	st, out, errs := callT(t, inspectWith, append(args, "--json")...)
	var rep inspectReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout %q, stderr %q", out, errs)
	assert.Equal(t, 1, strings.Count(out, "\n"), "one report, on one line")
	return st, rep
}

// keyOf returns the report of key.
func keyOf(t *testing.T, rep inspectReport, key string) keyReport {
	t.Helper()
	for _, k := range rep.Keys {
		if k.Key == key {
			return k
		}
	}
	t.Fatalf("no key %q in the report", key)
	return keyReport{}
}

func TestInspectOneMaster(t *testing.T) {
	_, addrs, cs := masters(t, 1)
	l := lockOn(t, cs, "job")
	short := l.Token()[:8] + "…"

	st, out, errs := callT(t, inspectWith, "--addrs", addrs, "--key", "job")
	assert.Equal(t, 0, st, errs)
	assert.Contains(t, out, "held by "+short+" on 1 of 1 master (quorum 1); valid for ")
	assert.NotContains(t, out, l.Token(), "tokens are shortened")

	st, rep := inspectJSON(t, "--addrs", addrs, "--key", "job")
	assert.Equal(t, 0, st)
	assert.Equal(t, []string{addrs}, rep.Masters)
	assert.Equal(t, 1, rep.Quorum)
	k := keyOf(t, rep, "job")
	require.Len(t, k.Masters, 1)
	m := k.Masters[0]
	assert.True(t, m.Held)
	assert.Equal(t, short, m.Token)
	assert.Equal(t, l.Fence(), m.Fence, "the fenced acquisition's token")
	assert.InDelta(t, time.Minute.Milliseconds(), m.TTLMs, 5000)
	assert.Equal(t, stateHeld, k.Verdict.State)
	assert.Equal(t, 1, k.Verdict.Holders)
	// Valid for the PTTL less the read time and 1% + 2 ms of drift.
	assert.Less(t, k.Verdict.ValidMs, m.TTLMs-m.TTLMs/100-1)
	assert.Greater(t, k.Verdict.ValidMs, m.TTLMs-m.TTLMs/100-1000)

	st, rep = inspectJSON(t, "--addrs", addrs, "--key", "job", "--full-tokens")
	assert.Equal(t, 0, st)
	assert.Equal(t, l.Token(), keyOf(t, rep, "job").Masters[0].Token)
	assert.Equal(t, l.Token(), keyOf(t, rep, "job").Verdict.Token)

	st, rep = inspectJSON(t, "--addrs", addrs, "--key", "free")
	assert.Equal(t, 0, st, "a free key is a known verdict")
	k = keyOf(t, rep, "free")
	assert.Equal(t, stateNotHeld, k.Verdict.State)
	assert.Equal(t, masterState{Master: addrs}, k.Masters[0])
}

// TestInspectFiveMasters: a lock held by a quorum (with a waiter on one
// master), a key held by a minority only, then a master down.
func TestInspectFiveMasters(t *testing.T) {
	cl, addrs, cs := masters(t, 5)
	l := lockOn(t, cs, "orders:42")
	short := l.Token()[:8] + "…"
	setOn(t, cs[3:], "orders:7", "0badc0de-minority")
	setOn(t, cs[:2], "orders:9", "feedf00d-pair")

	ps := cs[0].Subscribe(t.Context(), releasePrefix+"orders:42")
	defer ps.Close()
	_, err := ps.Receive(t.Context()) // the subscription is active
	require.NoError(t, err)

	st, rep := inspectJSON(t, "--addrs", addrs, "--key", "orders:42")
	assert.Equal(t, 0, st)
	assert.Equal(t, 3, rep.Quorum)
	k := keyOf(t, rep, "orders:42")
	assert.Equal(t, verdict{State: stateHeld, Token: short, Holders: 5, Answered: 5,
		ValidMs: k.Verdict.ValidMs, Why: k.Verdict.Why}, k.Verdict)
	assert.Greater(t, k.Verdict.ValidMs, int64(50_000))
	for i, m := range k.Masters {
		assert.Equal(t, cl.Addrs()[i], m.Master)
		assert.True(t, m.Held, m.Master)
		assert.Equal(t, short, m.Token)
		assert.Equal(t, l.Fence(), m.Fence)
		want := int64(0)
		if i == 0 {
			want = 1
		}
		assert.Equal(t, want, m.Waiters, "one subscriber, on the first master only")
	}

	st, rep = inspectJSON(t, "--addrs", addrs, "--key", "orders:7")
	assert.Equal(t, 0, st)
	k = keyOf(t, rep, "orders:7")
	assert.Equal(t, stateNotHeld, k.Verdict.State, "held by 2 of 5 only")
	assert.Equal(t, 2, k.Verdict.Holders)
	assert.Equal(t, "0badc0de…", k.Verdict.Token)
	assert.Zero(t, k.Verdict.ValidMs)

	require.NoError(t, cl.Servers[1].Kill())
	st, out, errs := callT(t, inspectWith, "--addrs", addrs, "--key", "orders:42")
	assert.Equal(t, 0, st, errs)
	assert.Regexp(t, cl.Addrs()[1]+`  error  -\s+-\s+-\s+-\s+\S+`, out)
	lines := strings.Split(out, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "TOKEN") })
	require.GreaterOrEqual(t, i, 0, out)
	for _, l := range append(lines[i+1:i+2:i+2], lines[i+3:i+6]...) { // the rows around the error's
		assert.Equal(t, strings.Index(lines[i], "TOKEN"), strings.Index(l, short), "aligned: %q", l)
	}
	assert.Contains(t, out, "held by "+short+" on 4 of 5 masters (quorum 3), 1 did not answer; valid for ")

	st, rep = inspectJSON(t, "--addrs", addrs, "--key", "orders:9")
	assert.Equal(t, 0, st, "1 holder + 1 silent master cannot make 3")
	k = keyOf(t, rep, "orders:9")
	assert.Equal(t, stateNotHeld, k.Verdict.State)
	assert.Equal(t, 1, k.Verdict.Holders)
	assert.Equal(t, 4, k.Verdict.Answered)
	assert.NotEmpty(t, k.Masters[1].Error)
	assert.False(t, k.Masters[1].Held)

	st, rep = inspectJSON(t, "--addrs", addrs, "--key", "orders:7")
	assert.Equal(t, exitUnavailable, st, "2 holders + 1 silent master could make 3")
	assert.Equal(t, stateUnknown, keyOf(t, rep, "orders:7").Verdict.State)

	require.NoError(t, cl.Servers[3].Kill())
	require.NoError(t, cl.Servers[2].Kill())
	st, rep = inspectJSON(t, "--addrs", addrs, "--key", "orders:42")
	assert.Equal(t, exitUnavailable, st, "2 of 5 answered")
	assert.Equal(t, stateUnknown, keyOf(t, rep, "orders:42").Verdict.State)
}

func TestInspectPrefix(t *testing.T) {
	_, addrs, cs := masters(t, 3)
	lockOn(t, cs, "p:b") // with its fence counter p:b:fence
	setOn(t, cs[:1], "p:a", "t-a")
	setOn(t, cs[2:], "p:c", "t-c")
	setOn(t, cs, "other", "t-o")
	setOn(t, cs, "p*x", "t-glob")
	require.NoError(t, cs[1].HSet(t.Context(), "p:hash", "f", "v").Err())

	st, rep := inspectJSON(t, "--addrs", addrs, "--prefix", "p:")
	assert.Equal(t, 0, st)
	assert.Equal(t, "p:", rep.Prefix)
	assert.False(t, rep.Truncated)
	var keys []string
	for _, k := range rep.Keys {
		keys = append(keys, k.Key)
	}
	assert.Equal(t, []string{"p:a", "p:b", "p:c"}, keys, "sorted, from every master, without fence counters or other types")
	assert.Equal(t, stateHeld, keyOf(t, rep, "p:b").Verdict.State)
	assert.Equal(t, stateNotHeld, keyOf(t, rep, "p:a").Verdict.State)

	st, rep = inspectJSON(t, "--addrs", addrs, "--prefix", "p:", "--limit", "2")
	assert.Equal(t, 0, st)
	assert.True(t, rep.Truncated)
	assert.Len(t, rep.Keys, 2)
	st, out, _ := callT(t, inspectWith, "--addrs", addrs, "--prefix", "p:", "--limit", "2")
	assert.Equal(t, 0, st)
	assert.Contains(t, out, `prefix "p:": 2 keys, more not shown`)

	_, rep = inspectJSON(t, "--addrs", addrs, "--prefix", "p*")
	require.Len(t, rep.Keys, 1, "a glob character in the prefix is literal")
	assert.Equal(t, "p*x", rep.Keys[0].Key)

	st, rep = inspectJSON(t, "--addrs", addrs, "--prefix", "none:")
	assert.Equal(t, 0, st)
	assert.Empty(t, rep.Keys)
	assert.NotNil(t, rep.Keys, "an empty list, not null")
}

// TestInspectWritesNothing compares every master's keyspace before and
// after inspections, and checks that they ran only read commands.
func TestInspectWritesNothing(t *testing.T) {
	_, addrs, cs := masters(t, 3)
	lockOn(t, cs, "w:held")
	setOn(t, cs[:1], "w:minority", "t-m")
	before := keyspaces(t, cs)
	for _, c := range cs {
		require.NoError(t, c.ConfigResetStat(t.Context()).Err())
	}
	for _, args := range [][]string{
		{"--key", "w:held"}, {"--key", "w:minority"}, {"--key", "w:absent"}, {"--prefix", "w:"}, {"--prefix", "w:", "--json"},
	} {
		st, _, errs := callT(t, inspectWith, append([]string{"--addrs", addrs}, args...)...)
		require.Equal(t, 0, st, errs)
	}
	read := []string{"get", "pttl", "scan", "pubsub|numsub", "multi", "exec",
		"hello", "client|setinfo", "ping", "info", "config|resetstat"} // the last two: this test's own
	for _, c := range cs {
		ran := redistest.CommandStats(t, c)
		for name := range ran {
			assert.Contains(t, read, name, "inspect ran %s", name)
		}
		assert.Contains(t, ran, "multi")
		assert.Contains(t, ran, "scan")
	}
	assert.Equal(t, before, keyspaces(t, cs), "the keyspaces are unchanged")
}

// keyspaces describes every key of every master: its value and whether it
// expires.
func keyspaces(t *testing.T, cs []*redis.Client) []map[string]string {
	t.Helper()
	var all []map[string]string
	for _, c := range cs {
		keys, err := c.Keys(t.Context(), "*").Result()
		require.NoError(t, err)
		slices.Sort(keys)
		m := map[string]string{}
		for _, k := range keys {
			v, err := c.Get(t.Context(), k).Result()
			require.NoError(t, err)
			ttl, err := c.PTTL(t.Context(), k).Result()
			require.NoError(t, err)
			m[k] = v + map[bool]string{true: " (expires)", false: " (kept)"}[ttl > 0]
		}
		all = append(all, m)
	}
	return all
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestInspectWatch refreshes until cancelled: the lock shows held, then,
// once released, free.
func TestInspectWatch(t *testing.T) {
	_, addrs, cs := masters(t, 1)
	l := lockOn(t, cs, "job")
	var out, errs syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- inspectWith(ctx, []string{"--addrs", addrs, "--key", "job", "--json", "--watch", "20ms"}, &out, &errs,
			func(string) (string, bool) { return "", false })
	}()
	states := func() []string {
		var s []string
		sc := bufio.NewScanner(strings.NewReader(out.String()))
		for sc.Scan() {
			var rep inspectReport
			require.NoError(t, json.Unmarshal(sc.Bytes(), &rep))
			s = append(s, keyOf(t, rep, "job").Verdict.State)
		}
		return s
	}
	waitFor := func(state string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(states(), state); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) { // a watchdog, not a timing claim
				t.Fatalf("no report said %q: %v", state, states())
			}
		}
	}
	waitFor(stateHeld)
	require.NoError(t, l.Unlock(t.Context()))
	waitFor(stateNotHeld)
	cancel()
	select {
	case st := <-done:
		assert.Equal(t, 0, st, errs.String())
	case <-time.After(10 * time.Second): // a watchdog, not a timing claim
		t.Fatal("--watch did not end when cancelled")
	}
	s := states()
	assert.GreaterOrEqual(t, len(s), 2)
	i := slices.Index(s, stateNotHeld)
	assert.Equal(t, slices.Repeat([]string{stateHeld}, i), s[:i], "held until released")
}

func TestInspectUsage(t *testing.T) {
	tests := []struct {
		args []string
		says string
	}{
		{[]string{"--addrs", "127.0.0.1:1"}, "give exactly one of --key and --prefix"},
		{[]string{"--addrs", "127.0.0.1:1", "--key", "k", "--prefix", "p"}, "give exactly one of --key and --prefix"},
		{[]string{"--addrs", "127.0.0.1:1", "--prefix", "p", "--limit", "0"}, `--limit "0": want a whole number of 1 or more, such as 100`},
		{[]string{"--addrs", "127.0.0.1:1", "--key", "k", "--watch", "-1s"}, `--watch "-1s": want a duration of 0 or more, such as 10s or 1m30s`},
		{[]string{"--addrs", "127.0.0.1:1", "--key", "k", "--timeout", "0s"}, `--timeout "0s": want a duration above 0, such as 10s or 1m30s`},
		{[]string{"--addrs", "127.0.0.1:1", "--key", "k", "extra"}, `unexpected argument "extra"`},
		{[]string{"--key", "k"}, "no masters: give --addrs or set LOCK_DISTRIBUTED_NODES"},
		{[]string{"--addrs", "127.0.0.1:1,127.0.0.1:1", "--key", "k"}, "--addrs: master 127.0.0.1:1 is given twice"},
		{[]string{"--addrs", "redis://:" + secret + "@127.0.0.1:1", "--key", "k"}, "redis://xxxxx@127.0.0.1:1"},
		{[]string{"--bogus"}, "unknown flag --bogus"},
	}
	for _, tt := range tests {
		st, out, errs := callT(t, inspectWith, tt.args...)
		assert.Equal(t, exitUsage, st, "%v", tt.args)
		assert.Empty(t, out)
		assert.Contains(t, errs, tt.says, "%v", tt.args)
		assertNoSecret(t, errs)
	}
}

// TestInspectHidesPasswords: masters given with a password are shown as
// host:port only.
func TestInspectHidesPasswords(t *testing.T) {
	_, addr, cs := masters(t, 1)
	require.NoError(t, cs[0].ConfigSet(t.Context(), "requirepass", secret).Err())
	u := "redis://" + url.UserPassword("alice", secret).String() + "@" + addr
	for _, args := range [][]string{{"--key", "k"}, {"--key", "k", "--json"}, {"--prefix", "k"}} {
		st, out, errs := callT(t, inspectWith, append([]string{"--addrs", u}, args...)...)
		assert.Equal(t, exitUnavailable, st, "alice is refused: %s", out) // no such user
		assert.Contains(t, out, addr)
		assertNoSecret(t, out+errs)
	}
	u = "redis://:" + url.PathEscape(secret) + "@" + addr
	st, out, errs := callT(t, inspectWith, "--addrs", u, "--key", "k")
	assert.Equal(t, 0, st, out+errs)
	assert.Contains(t, out, addr+"  no ")
	assertNoSecret(t, out+errs)
}

// TestInspectNodeURLs: inspect reads node URLs as envconfig does, so a
// URL with replica_ack parameters (envconfig's own, which go-redis
// refuses) names its master; a cluster or Sentinel URL is refused in
// words.
func TestInspectNodeURLs(t *testing.T) {
	_, addrs, cs := masters(t, 1)
	lockOn(t, cs, "job")
	st, rep := inspectJSON(t, "--addrs", "redis://"+addrs+"?replica_ack=1&replica_ack_timeout=1s", "--key", "job")
	assert.Equal(t, 0, st)
	assert.Equal(t, []string{addrs}, rep.Masters)
	assert.True(t, keyOf(t, rep, "job").Masters[0].Held)

	st, _, errs := callT(t, inspectWith, "--addrs", "redis+cluster://"+addrs, "--key", "job")
	assert.NotEqual(t, 0, st)
	assert.Contains(t, errs, "standalone masters only")
}
