package main

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// values returns key's value on every client ("" when absent).
func values(t *testing.T, cs []*redis.Client, key string) []string {
	t.Helper()
	var vs []string
	for _, c := range cs {
		v, err := c.Get(t.Context(), key).Result()
		if err != redis.Nil {
			require.NoError(t, err)
		}
		vs = append(vs, v)
	}
	return vs
}

func repeat(s string, n int) []string { return slices.Repeat([]string{s}, n) }

// TestReleaseByToken releases a lock taken by the library, on 1 and 5
// masters: the key is gone, the release was announced to waiters, and the
// lock's own Unlock then finds it not held.
func TestReleaseByToken(t *testing.T) {
	for _, n := range []int{1, 5} {
		_, addrs, cs := masters(t, n)
		l := lockOn(t, cs, "job")
		ps := cs[0].Subscribe(t.Context(), releasePrefix+"job")
		defer ps.Close()
		_, err := ps.Receive(t.Context())
		require.NoError(t, err)

		st, out, errs := callT(t, releaseWith, "--addrs", addrs, "--key", "job", "--token", l.Token())
		assert.Equal(t, 0, st, errs)
		assert.Equal(t, n, strings.Count(out, "  released\n"), out)
		assert.Contains(t, out, `released "job" (token `+l.Token()[:8]+"…) on "+strconv.Itoa(n)+" of "+nMasters(n)+"; ")
		assert.NotContains(t, out+errs, l.Token(), "only the shortened token is echoed")
		assert.Equal(t, repeat("", n), values(t, cs, "job"))

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a watchdog
		msg, err := ps.ReceiveMessage(ctx)
		cancel()
		require.NoError(t, err, "the release is announced")
		assert.Equal(t, l.Token(), msg.Payload)

		assert.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld)
	}
}

func TestReleaseWrongToken(t *testing.T) {
	_, addrs, cs := masters(t, 3)
	l := lockOn(t, cs, "job")
	st, out, errs := callT(t, releaseWith, "--addrs", addrs, "--key", "job", "--token", "8d6e0b0a-not-the-holder")
	assert.Equal(t, exitFailure, st)
	assert.Equal(t, 3, strings.Count(out, "  not held by 8d6e0b0a…\n"), out)
	assert.Contains(t, errs, `redlock release: nothing released: no master that answered held "job" with token 8d6e0b0a…`)
	assert.Equal(t, repeat(l.Token(), 3), values(t, cs, "job"), "nothing deleted")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestReleaseForce deletes whatever each master holds, and says so.
func TestReleaseForce(t *testing.T) {
	_, addrs, cs := masters(t, 3)
	setOn(t, cs[:2], "job", "aaaaaaaa-first")
	setOn(t, cs[2:], "job", "bbbbbbbb-second")
	setOn(t, cs, "other", "cccccccc-untouched")
	st, out, errs := callT(t, releaseWith, "--addrs", addrs, "--key", "job", "--force")
	assert.Equal(t, 0, st, errs)
	addr := strings.Split(addrs, ",")
	for i, tok := range []string{"aaaaaaaa…", "aaaaaaaa…", "bbbbbbbb…"} {
		assert.Contains(t, errs, `redlock release: --force: deleting "job" on `+addr[i]+", held by token "+tok+"\n")
	}
	assert.NotContains(t, errs, "first")
	assert.Equal(t, 3, strings.Count(out, "  released\n"), out)
	assert.Equal(t, repeat("", 3), values(t, cs, "job"))
	assert.Equal(t, repeat("cccccccc-untouched", 3), values(t, cs, "other"))

	st, out, errs = callT(t, releaseWith, "--addrs", addrs, "--key", "job", "--force")
	assert.Equal(t, exitFailure, st, "nothing left to release")
	assert.Equal(t, 3, strings.Count(out, "  not held\n"), out)
	assert.NotContains(t, errs, "deleting")
}

// TestReleaseMasterDown reports the master that did not answer and
// releases on the others; with fewer than a quorum answering it says the
// lock may still be held.
func TestReleaseMasterDown(t *testing.T) {
	cl, addrs, cs := masters(t, 5)
	l := lockOn(t, cs, "job")
	require.NoError(t, cl.Servers[1].Kill())
	st, out, errs := callT(t, releaseWith, "--addrs", addrs, "--key", "job", "--token", l.Token())
	assert.Equal(t, 0, st, errs)
	assert.Contains(t, out, cl.Addrs()[1]+"  error: ")
	assert.Equal(t, 4, strings.Count(out, "  released\n"), out)
	assert.Contains(t, out, "on 4 of 5 masters; 4 answered (quorum 3)")
	assert.Equal(t, []string{"", "", "", ""}, values(t, append(cs[:1:1], cs[2:]...), "job"))

	setOn(t, append(cs[:1:1], cs[2:]...), "job2", "dddddddd-t")
	require.NoError(t, cl.Servers[2].Kill())
	require.NoError(t, cl.Servers[3].Kill())
	st, out, errs = callT(t, releaseWith, "--addrs", addrs, "--key", "job2", "--token", "dddddddd-t")
	assert.Equal(t, exitUnavailable, st, out)
	assert.Equal(t, 2, strings.Count(out, "  released\n"), out)
	assert.Contains(t, errs, `redlock release: only 2 of 5 masters answered (quorum 3): "job2" may still be held`)
}

func TestReleaseUsage(t *testing.T) {
	_, addrs, cs := masters(t, 1)
	setOn(t, cs, "job", "tttttttt-held")
	tests := []struct {
		args []string
		says string
	}{
		{[]string{"--addrs", addrs, "--key", "job"}, "--token is required (or --force, to release whatever token holds the key)"},
		{[]string{"--addrs", addrs, "--token", "t"}, "--key is required"},
		{[]string{"--addrs", addrs, "--key", "job", "--token", "t", "--force"}, "give --token or --force, not both"},
		{[]string{"--addrs", addrs, "--key", "job", "--force", "--timeout", "-1s"}, `--timeout "-1s": want a duration above 0, such as 10s or 1m30s`},
		{[]string{"--addrs", addrs, "--key", "job", "--force", "now"}, `unexpected argument "now"`},
		{[]string{"--key", "job", "--force"}, "no masters"},
		{[]string{"--addrs", "redis://alice:" + url.PathEscape(secret) + "@" + addrs + "/x", "--key", "job", "--force"}, "redis://xxxxx@" + addrs + "/x"},
		{[]string{"--force=maybe"}, `--force "maybe": want true or false`},
	}
	for _, tt := range tests {
		st, out, errs := callT(t, releaseWith, tt.args...)
		assert.Equal(t, exitUsage, st, "%v", tt.args)
		assert.Empty(t, out)
		assert.Contains(t, errs, tt.says, "%v", tt.args)
		assertNoSecret(t, errs)
	}
	assert.Equal(t, []string{"tttttttt-held"}, values(t, cs, "job"), "nothing deleted")
}
