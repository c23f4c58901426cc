package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/quorumlock/redlock/envconfig"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secret is the password the tests give on the command line; a parser
// could quote either piece of it on its own.
const secret = "pa55/w0rd"

func assertNoSecret(t *testing.T, out string) {
	t.Helper()
	for _, p := range []string{"pa55", "w0rd", "alice"} {
		assert.NotContains(t, out, p)
	}
}

// redlock run never prints a password given in --addrs or in
// LOCK_DISTRIBUTED_NODES: not for a malformed URL (64), not for a master
// that refuses it or does not answer (69).
func TestRunHidesPasswords(t *testing.T) {
	addr, c := oneMaster(t)
	require.NoError(t, c.ConfigSet(t.Context(), "requirepass", "the-real-one").Err())
	c = redis.NewClient(&redis.Options{Addr: addr, Password: "the-real-one", ContextTimeoutEnabled: true})
	defer c.Close()
	enc := url.UserPassword("alice", secret).String()
	tests := []struct {
		addrs  string
		status int
		shows  string // what stderr names instead
	}{
		{"redis://:" + secret + "@127.0.0.1:6379", exitUsage, "redis://xxxxx@127.0.0.1:6379"},   // unescaped '/'
		{"redis://" + enc + "@127.0.0.1:6379/db", exitUsage, "redis://xxxxx@127.0.0.1:6379/db"}, // bad database
		{"127.0.0.1:6379,redis://" + enc + "@[::1", exitUsage, "redis://xxxxx@[::1"},            // bad host
		{"redis://" + enc + "@" + addr, exitUnavailable, addr},                                  // refused
		{":" + url.PathEscape(secret) + "@" + addr, exitUnavailable, addr},                      // host:port form, refused
	}
	for _, tt := range tests {
		st, _, errs := runT(t, "--addrs", tt.addrs, "--key", "job", "--", "true")
		assert.Equal(t, tt.status, st, errs)
		assert.Contains(t, errs, tt.shows)
		assertNoSecret(t, errs)

		env := func(k string) (string, bool) {
			if k == envconfig.VarNodes {
				return tt.addrs, true
			}
			return "", false
		}
		var out, errb bytes.Buffer
		st = runWith(t.Context(), []string{"--key", "job", "--", "true"}, strings.NewReader(""), &out, &errb, env)
		assert.Equal(t, tt.status, st, errb.String())
		assertNoSecret(t, errb.String())
	}
	n, err := c.Exists(context.Background(), "job").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no run got the lock")
}

// bench and demo take host:port only; a URL with a password is refused
// without being echoed.
func TestBenchAndDemoAddrsHidePasswords(t *testing.T) {
	for _, addrs := range []string{
		"redis://:" + secret + "@127.0.0.1:6379",
		"redis://alice:" + url.PathEscape(secret) + "@127.0.0.1:6379",
		"alice:" + secret + "@127.0.0.1:6379",
		"pa55w0rd@127.0.0.1:6379",
		"127.0.0.1:6379,:" + secret + "@127.0.0.1:6380",
	} {
		_, err := parseAddrs(addrs)
		require.Error(t, err, addrs)
		assert.Contains(t, err.Error(), "xxxxx")
		assertNoSecret(t, err.Error())
		_, err = newDemoCluster(addrs)
		require.Error(t, err, addrs)
		assertNoSecret(t, err.Error())
	}
}
