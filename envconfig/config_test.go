package envconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vars is a lookup over a map, so the tests never touch the process
// environment.
func vars(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Load(vars(nil))
	require.NoError(t, err)
	assert.Equal(t, Config{Strategy: "retry", TTL: 10 * time.Second, Retries: 3, RetryDelay: 100 * time.Millisecond, Client: "go-redis"}, c)

	// Blank values count as unset.
	c2, err := Load(vars(map[string]string{VarEnabled: "", VarTTL: "  ", VarStrategy: "", VarNodes: "", VarClient: " "}))
	require.NoError(t, err)
	assert.Equal(t, c, c2)
}

func TestConfigEachVariable(t *testing.T) {
	def, err := Load(vars(nil))
	require.NoError(t, err)
	tests := []struct {
		env  map[string]string
		edit func(*Config)
	}{
		{map[string]string{VarEnabled: "false"}, func(c *Config) {}},
		{map[string]string{VarEnabled: "TRUE", VarNodes: "redis://127.0.0.1:6379"},
			func(c *Config) { c.Enabled = true; c.Nodes = []string{"redis://127.0.0.1:6379"} }},
		{map[string]string{VarEnabled: "1", VarNodes: " redis://127.0.0.1:7001/0 , redis://:secret@127.0.0.1:7002,rediss://127.0.0.1:7003 "},
			func(c *Config) {
				c.Enabled = true
				c.Nodes = []string{"redis://127.0.0.1:7001/0", "redis://:secret@127.0.0.1:7002", "rediss://127.0.0.1:7003"}
			}},
		{map[string]string{VarEnabled: "false", VarNodes: "redis://127.0.0.1:6379"}, // nodes may be listed while disabled
			func(c *Config) { c.Nodes = []string{"redis://127.0.0.1:6379"} }},
		{map[string]string{VarStrategy: "reject"}, func(c *Config) { c.Strategy = StrategyReject }},
		{map[string]string{VarStrategy: " Retry "}, func(c *Config) { c.Strategy = StrategyRetry }},
		{map[string]string{VarTTL: "30"}, func(c *Config) { c.TTL = 30 * time.Second }},
		{map[string]string{VarTTL: "1"}, func(c *Config) { c.TTL = time.Second }},
		{map[string]string{VarRetry: "0"}, func(c *Config) { c.Retries = 0 }},
		{map[string]string{VarRetry: "7"}, func(c *Config) { c.Retries = 7 }},
		{map[string]string{VarRetryDelay: "0"}, func(c *Config) { c.RetryDelay = 0 }},
		{map[string]string{VarRetryDelay: "250"}, func(c *Config) { c.RetryDelay = 250 * time.Millisecond }},
		{map[string]string{VarClient: "go-redis"}, func(c *Config) { c.Client = ClientGoRedis }},
		{map[string]string{VarClient: " Rueidis "}, func(c *Config) { c.Client = ClientRueidis }},
		{map[string]string{VarEnabled: "0", VarNodes: "redis://h:1?replica_ack=1&replica_ack_timeout=500ms"}, // kept as written
			func(c *Config) { c.Nodes = []string{"redis://h:1?replica_ack=1&replica_ack_timeout=500ms"} }},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.env), func(t *testing.T) {
			want := def
			tt.edit(&want)
			got, err := Load(vars(tt.env))
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}

func TestConfigMalformed(t *testing.T) {
	tests := []struct{ name, value string }{
		{VarEnabled, "yes"},
		{VarEnabled, "on"},
		{VarEnabled, "2"},
		{VarStrategy, "wait"},
		{VarStrategy, "retry,reject"},
		{VarTTL, "ten"},
		{VarTTL, "10s"},
		{VarTTL, "1.5"},
		{VarTTL, "0"},
		{VarTTL, "-5"},
		{VarTTL, "+5"},
		{VarTTL, "99999999999999999999"},
		{VarTTL, "9300000000"}, // overflows a time.Duration in seconds
		{VarRetry, "-1"},
		{VarRetry, "three"},
		{VarRetry, "3.0"},
		{VarRetryDelay, "-100"},
		{VarRetryDelay, "100ms"},
		{VarRetryDelay, "0x10"},
		{VarNodes, "127.0.0.1:6379"},            // no scheme
		{VarNodes, "http://127.0.0.1:6379"},     // wrong scheme
		{VarNodes, "redis://127.0.0.1:6379/db"}, // bad database number
		{VarNodes, "redis://127.0.0.1:6379,,redis://127.0.0.1:6380"},
		{VarNodes, "redis://127.0.0.1:6379,"},
		{VarNodes, "redis://127.0.0.1:6379?replica_ack=1"}, // no timeout
		{VarNodes, "redis://127.0.0.1:99999"},              // port out of range
		{VarNodes, "redis://127.0.0.1:0"},
		{VarNodes, "redis://127.0.0.1:"}, // empty port
		{VarNodes, "redis://"},           // no host: go-redis would take localhost:6379
		{VarNodes, "rediss://"},
		{VarNodes, "redis://:6379"},
		{VarNodes, "redis:///0"},
		{VarNodes, "unix://"},
		{VarClient, "redigo"},
		{VarClient, "go_redis"},
		{VarClient, "go-redis,rueidis"},
	}
	for _, tt := range tests {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			_, err := Load(vars(map[string]string{tt.name: tt.value}))
			require.Error(t, err)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			var ee *Error
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tt.name, ee.Var)
			assert.Equal(t, tt.value, ee.Value)
			assert.Contains(t, err.Error(), tt.name)
			assert.Contains(t, err.Error(), strconv.Quote(tt.value))
		})
	}

	t.Run("enabled without nodes", func(t *testing.T) {
		_, err := Load(vars(map[string]string{VarEnabled: "true"}))
		assert.ErrorIs(t, err, redlock.ErrInvalid)
		var ee *Error
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, VarNodes, ee.Var)
		assert.Contains(t, err.Error(), VarEnabled)
	})
	t.Run("parse error is reachable", func(t *testing.T) {
		_, err := Load(vars(map[string]string{VarTTL: "ten"}))
		assert.ErrorIs(t, err, strconv.ErrSyntax)
	})
	t.Run("nil lookup", func(t *testing.T) {
		_, err := Load(nil)
		assert.ErrorIs(t, err, redlock.ErrInvalid)
	})
}

// Every address is checked when the configuration is read (and again by
// Open): a host, and a port from 1 to 65535 when one is given.
func TestConfigNodeAddresses(t *testing.T) {
	for _, tt := range []struct{ url, says string }{
		{"redis://127.0.0.1:99999", `"redis://127.0.0.1:99999": port "99999": want a number from 1 to 65535`},
		{"redis://", `"redis://": no host: want redis://host[:port][/db]`},
		{"rediss://:6380/1", `"rediss://:6380/1": no host: want rediss://host[:port][/db]`},
		{"redis://:" + url.PathEscape(secret) + "@127.0.0.1:65536", `"redis://xxxxx@127.0.0.1:65536": port "65536"`},
		{"redis://:" + url.PathEscape(secret) + "@", `"redis://xxxxx@": no host`},
	} {
		_, err := Load(vars(map[string]string{VarEnabled: "true", VarNodes: tt.url}))
		require.ErrorIs(t, err, redlock.ErrInvalid, tt.url)
		assert.ErrorContains(t, err, tt.says)
		assertNoSecret(t, err)
		_, _, err = Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{tt.url}}.Open()
		require.ErrorIs(t, err, redlock.ErrInvalid, tt.url)
		assert.ErrorContains(t, err, tt.says)
	}
	for _, u := range []string{"redis://127.0.0.1", "redis://h:1", "redis://h:65535/2", "rediss://[::1]:6380", "unix:///run/redis.sock", "REDIS://H:6379"} {
		_, err := ParseNode(u)
		assert.NoError(t, err, u)
	}
}

// Each number variable has one message for every value it refuses, which
// names its form, its unit and an example.
func TestConfigNumberMessages(t *testing.T) {
	for name, tt := range map[string]struct {
		values []string
		want   string
	}{
		VarTTL: {[]string{"abc", "0", "00", "10s", "-5", "+5", "1.5", "1e3", "0x10", "1_000", "١٠"},
			"want a positive whole number of seconds, such as 10"},
		VarRetry: {[]string{"three", "-1", "+1", "3.0", "3 4"},
			"want a whole number of retries, 0 or more, such as 3"},
		VarRetryDelay: {[]string{"100ms", "-100", "0.5", "1s"},
			"want a whole number of milliseconds, 0 or more, such as 100"},
	} {
		for _, v := range tt.values {
			_, err := Load(vars(map[string]string{name: v}))
			assert.EqualError(t, err, fmt.Sprintf("envconfig: invalid %s=%q: %s", name, v, tt.want))
			assert.ErrorIs(t, err, redlock.ErrInvalid)
		}
	}
	_, err := Load(vars(map[string]string{VarTTL: "9300000000"}))
	assert.EqualError(t, err, `envconfig: invalid LOCK_DISTRIBUTED_TTL="9300000000": want a positive whole number of seconds, such as 10 (at most 9223372036)`)
	assert.ErrorIs(t, err, strconv.ErrRange)
	_, err = Load(vars(map[string]string{VarRetryDelay: "99999999999999999999"}))
	assert.ErrorContains(t, err, "want a whole number of milliseconds, 0 or more, such as 100 (at most 9223372036854)")
	c, err := Load(vars(map[string]string{VarTTL: "9223372036", VarRetry: "0", VarRetryDelay: "0"}))
	require.NoError(t, err)
	assert.Equal(t, 9223372036*time.Second, c.TTL)
}

func TestConfigOpenRejectsBadConfig(t *testing.T) {
	good := Config{Strategy: StrategyRetry, TTL: time.Second, Retries: 1, RetryDelay: time.Millisecond}
	tests := map[string]func(*Config){
		"zero value":        func(c *Config) { *c = Config{} },
		"unknown strategy":  func(c *Config) { c.Strategy = "Reject" },
		"zero TTL":          func(c *Config) { c.TTL = 0 },
		"negative retries":  func(c *Config) { c.Retries = -1 },
		"negative delay":    func(c *Config) { c.RetryDelay = -time.Millisecond },
		"enabled, no nodes": func(c *Config) { c.Enabled = true },
		"bad URL":           func(c *Config) { c.Enabled = true; c.Nodes = []string{"localhost"} },
		"duplicate nodes": func(c *Config) {
			c.Enabled = true
			c.Nodes = []string{"redis://127.0.0.1:1", "redis://127.0.0.1:1"}
		},
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			c := good
			edit(&c)
			l, closer, err := c.Open()
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Nil(t, l)
			assert.Nil(t, closer)
		})
	}
	_, closer, err := good.Open()
	require.NoError(t, err)
	require.NoError(t, closer.Close())
}

// LOCK_DISTRIBUTED_NODES given while LOCK_DISTRIBUTED_ENABLED is not set
// would lock nothing, silently (two concurrent writes to one record both
// ran). Open refuses it, naming the variable to set; Load still reads
// it, for tools that only read the nodes.
func TestConfigNodesWithoutEnabled(t *testing.T) {
	nodes := "redis://:" + url.PathEscape(secret) + "@127.0.0.1:6379,redis://127.0.0.1:6380"
	for _, env := range []map[string]string{
		{VarNodes: nodes},
		{VarNodes: nodes, VarEnabled: "  "}, // blank counts as unset
	} {
		c, err := Load(vars(env))
		require.NoError(t, err)
		assert.False(t, c.Enabled)
		assert.Contains(t, c.String(), "not enabled: LOCK_DISTRIBUTED_ENABLED is not set, so Open refuses these nodes")
		for _, open := range []func() (redlock.Locker, *Clients, error){
			func() (redlock.Locker, *Clients, error) { return c.Open() },
			func() (redlock.Locker, *Clients, error) { return c.OpenWith((&fakeLib{}).client()) },
		} {
			l, clients, err := open()
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Nil(t, l)
			assert.Nil(t, clients)
			var ee *Error
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, VarNodes, ee.Var)
			assert.Contains(t, err.Error(), "set LOCK_DISTRIBUTED_ENABLED=true to lock through them, or LOCK_DISTRIBUTED_ENABLED=false to run without locking")
			assertNoSecret(t, err)
		}
		// Enabling it, by the variable or by hand, opens it.
		c.Enabled = true
		_, clients, err := c.Open()
		require.NoError(t, err)
		assert.False(t, clients.Disabled())
		require.NoError(t, clients.Close())
	}

	// Set explicitly to false, the nodes are the documented no-op, and
	// Open says so.
	c, err := Load(vars(map[string]string{VarNodes: nodes, VarEnabled: "false"}))
	require.NoError(t, err)
	l, clients, err := c.Open()
	require.NoError(t, err)
	assert.True(t, clients.Disabled())
	assert.True(t, strings.HasPrefix(clients.String(), Disabled+";"), clients.String())
	assert.True(t, strings.HasPrefix(fmt.Sprintf("%v", clients), "disabled: every lock is granted without Redis;"))
	a, err := l.Lock(t.Context(), "k")
	require.NoError(t, err)
	b, err := l.Lock(t.Context(), "k")
	require.NoError(t, err, "no exclusion: that is what disabled means")
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, b.Unlock(t.Context()))
	require.NoError(t, clients.Close())

	// A Config built by hand says what it means: Enabled false is the no-op.
	_, clients, err = Config{Strategy: StrategyRetry, TTL: time.Second, Nodes: []string{"redis://127.0.0.1:6379"}}.Open()
	require.NoError(t, err)
	assert.True(t, clients.Disabled())
}

// Clients print the Config they were opened from, secrets masked, with
// every verb and slog; never a client's options.
func TestClientsPrinting(t *testing.T) {
	c := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second,
		Nodes: []string{"redis://alice:" + url.PathEscape(secret) + "@127.0.0.1:6379"}}
	_, clients, err := c.Open()
	require.NoError(t, err)
	defer clients.Close()
	assert.False(t, clients.Disabled())
	assert.Equal(t, c.String(), clients.String())
	assert.Equal(t, fmt.Sprintf("%+v", c), fmt.Sprintf("%+v", clients))
	assert.Equal(t, "&envconfig.Clients{Config:"+c.GoString()+"}", fmt.Sprintf("%#v", clients))
	assertNoSecret(t, clients, "pa55", "w0rd", "alice")
	var nilClients *Clients
	assert.NoError(t, nilClients.Close())
	assert.Equal(t, "<nil>", fmt.Sprint(nilClients))
}

// A disabled configuration needs no Redis and grants every lock, even
// many at once on one key: the application runs unchanged.
func TestConfigDisabledGrantsEverything(t *testing.T) {
	c, err := Load(vars(map[string]string{VarStrategy: "reject"}))
	require.NoError(t, err)
	l, closer, err := c.Open()
	require.NoError(t, err)
	defer closer.Close()

	const n = 20
	locks := make([]*redlock.Lock, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { locks[i], errs[i] = l.Lock(t.Context(), "rf:lock:p:e:1:write") })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "lock %d", i)
		assert.True(t, locks[i].Until().After(time.Now()), "the lock has the configured validity")
	}
	for _, lk := range locks {
		require.NoError(t, lk.Extend(t.Context(), 2*time.Second))
		require.NoError(t, lk.Unlock(t.Context()))
	}
	assert.ErrorIs(t, locks[0].Unlock(t.Context()), redlock.ErrNotHeld, "a Lock is still released only once")
	require.NoError(t, closer.Close())
	require.NoError(t, closer.Close(), "Close is idempotent")
}

// Do works on a disabled locker too, with no exclusion: every function
// runs at once (each waits until all have started), and the heartbeat,
// had it time to beat, would renew against nothing.
func TestConfigDisabledDo(t *testing.T) {
	l, closer, err := Config{Strategy: StrategyReject, TTL: time.Second}.Open()
	require.NoError(t, err)
	defer closer.Close()
	const n = 8
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	errs := make(chan error, n)
	for range n {
		go func() {
			errs <- l.Do(t.Context(), "rf:lock:p:e:1:write", func(ctx context.Context) error {
				started.Done()
				select {
				case <-all:
					return ctx.Err()
				case <-time.After(20 * time.Second): // a watchdog, not a timing claim
					return errors.New("not every function ran at the same time")
				}
			})
		}()
	}
	for range n {
		assert.NoError(t, <-errs)
	}
}

// Code written WithFencing runs unchanged on a disabled locker: tokens
// are issued, and increase.
func TestConfigDisabledFencing(t *testing.T) {
	l, closer, err := Config{Strategy: StrategyRetry, TTL: time.Second}.Open(redlock.WithFencing())
	require.NoError(t, err)
	defer closer.Close()
	var last int64
	for range 5 {
		lk, err := l.Lock(t.Context(), "k")
		require.NoError(t, err)
		assert.Greater(t, lk.Fence(), last)
		last = lk.Fence()
		require.NoError(t, lk.Unlock(t.Context()))
	}
}

// The strategy the variables describe is the one Lock follows: under
// retry, the waits are RETRY_DELAY·2^i for RETRY retries, then ErrTimeout;
// under reject, one attempt whatever RETRY says.
func TestConfigStrategyReachesLocker(t *testing.T) {
	srv := miniredis.RunT(t)
	node := "redis://" + srv.Addr()
	srv.Set("k", "someone else")

	var attempts atomic.Int32
	count := redlock.WithObserver(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			attempts.Add(1)
		}
	})
	c, err := Load(vars(map[string]string{VarEnabled: "true", VarNodes: node, VarRetry: "4", VarRetryDelay: "30", VarTTL: "7"}))
	require.NoError(t, err)
	l, closer, err := c.Open(count, redlock.WithHandoff(false))
	require.NoError(t, err)
	defer closer.Close()
	start := time.Now()
	_, err = l.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrTimeout)
	assert.EqualValues(t, 5, attempts.Load(), "a first attempt and 4 retries")
	assert.GreaterOrEqual(t, time.Since(start), (30+60+120+240)*time.Millisecond, "waits of 30 ms doubled")

	lk, err := l.Lock(t.Context(), "other")
	require.NoError(t, err)
	assert.Equal(t, 7*time.Second, srv.TTL("other"), "TTL is in seconds")
	require.NoError(t, lk.Unlock(t.Context()))

	attempts.Store(0)
	c, err = Load(vars(map[string]string{VarEnabled: "true", VarNodes: node, VarStrategy: "reject", VarRetry: "4"}))
	require.NoError(t, err)
	l, closer2, err := c.Open(count)
	require.NoError(t, err)
	defer closer2.Close()
	_, err = l.Lock(t.Context(), "k")
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.NotErrorIs(t, err, redlock.ErrTimeout, "reject makes one attempt")
	assert.EqualValues(t, 1, attempts.Load())
}

// An enabled configuration against real redis-server processes: one URL
// gives a Single, three a Redlock; both exclude, and Close closes the
// clients the configuration created.
func TestConfigEnabledRealNodes(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			addrs := redistest.Start(t, n).Addrs()
			urls := make([]string, n)
			for i, a := range addrs {
				urls[i] = "redis://" + a
			}
			c, err := Load(vars(map[string]string{
				VarEnabled: "true", VarStrategy: "reject", VarTTL: "5",
				VarNodes: strings.Join(urls, ","),
			}))
			require.NoError(t, err)
			l, closer, err := c.Open()
			require.NoError(t, err)
			if n == 1 {
			} else {
				assert.IsType(t, &redlock.Redlock{}, l)
			}

			first, err := l.Lock(t.Context(), "order:1")
			require.NoError(t, err)
			_, err = l.Lock(t.Context(), "order:1")
			assert.ErrorIs(t, err, redlock.ErrNotAcquired)
			other, err := l.Lock(t.Context(), "order:2")
			require.NoError(t, err)
			require.NoError(t, first.Unlock(t.Context()))
			require.NoError(t, other.Unlock(t.Context()))

			// The key really is on every node, with the configured TTL.
			again, err := l.Lock(t.Context(), "order:1")
			require.NoError(t, err)
			for _, a := range addrs {
				ttl := redistest.Client(t, a).PTTL(t.Context(), "order:1").Val()
				assert.True(t, ttl > 4*time.Second && ttl <= 5*time.Second, "TTL on %s: %v", a, ttl)
			}
			require.NoError(t, again.Unlock(t.Context()))

			require.NoError(t, closer.Close())
			_, err = l.Lock(t.Context(), "order:3")
			assert.ErrorIs(t, err, redlock.ErrUnavailable, "closed clients cannot answer")
			assert.False(t, errors.Is(err, redlock.ErrNotAcquired))
		})
	}
}

// secret is the password the redaction tests put into node URLs; pieces
// are fragments of it that a parser could quote on their own.
const secret = "pa55/w0rd"

var secretPieces = []string{"pa55", "w0rd"}

// assertNoSecret fails when any rendering of v (its Error or String, %v,
// %+v, %#v, %s, %q, %d, and slog's text and JSON output) shows the
// password or a piece of it.
func assertNoSecret(t *testing.T, v any, pieces ...string) {
	t.Helper()
	var outs []string
	if err, ok := v.(error); ok {
		outs = append(outs, err.Error())
	}
	if s, ok := v.(fmt.Stringer); ok {
		outs = append(outs, s.String())
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, v))
	}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Error("startup failed", "v", v)
	slog.New(slog.NewJSONHandler(&logs, nil)).Error("startup failed", "v", v)
	outs = append(outs, logs.String())
	if len(pieces) == 0 {
		pieces = append([]string{secret}, secretPieces...)
	}
	for _, out := range outs {
		for _, p := range pieces {
			if strings.Contains(out, p) {
				t.Errorf("%q shows %q", out, p)
				return
			}
		}
	}
}

// A malformed LOCK_DISTRIBUTED_NODES never shows a password, however the
// URLs around it are broken; the error still names the variable and shows
// the URLs with their user info masked.
func TestConfigErrorsHidePasswords(t *testing.T) {
	enc := url.UserPassword("alice", secret).String() // alice:pa55%2Fw0rd
	tests := []struct {
		name, value, shows string
	}{
		{"bad db", "redis://:" + url.PathEscape(secret) + "@127.0.0.1:6379/db", `"redis://xxxxx@127.0.0.1:6379/db"`},
		{"user and bad db", "redis://" + enc + "@127.0.0.1:6379/x", "invalid database number"},
		{"another URL bad", "redis://" + enc + "@127.0.0.1:7001,http://127.0.0.1:7002", "redis://xxxxx@127.0.0.1:7001,http://127.0.0.1:7002"},
		{"empty element", "redis://" + enc + "@127.0.0.1:7001,,redis://127.0.0.1:7002", "empty URL"},
		{"unescaped slash", "redis://:" + secret + "@127.0.0.1:6379", "redis://xxxxx@127.0.0.1:6379"},
		{"unescaped slash, user", "redis://alice:" + secret + "@127.0.0.1:6379/0", "redis://xxxxx@127.0.0.1:6379/0"},
		{"comma", "redis://:pa55,w0rd@127.0.0.1:6379", "xxxxx"},
		{"blank", "redis://:pa55 w0rd@127.0.0.1:6379", "xxxxx"},
		{"bad escape", "redis://:pa55%zzw0rd@127.0.0.1:6379", "xxxxx"},
		{"at sign", "redis://:pa55@w0rd@127.0.0.1:6379/db", "xxxxx"},
		{"no scheme", ":" + secret + "@127.0.0.1:6379", "xxxxx@127.0.0.1:6379"},
		{"bad query", "redis://:" + url.PathEscape(secret) + "@127.0.0.1:6379?dial_timeout=soon", "dial_timeout"},
		{"user only", "redis://pa55w0rd@127.0.0.1:6379/db", "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(vars(map[string]string{VarEnabled: "true", VarNodes: tt.value}))
			require.Error(t, err)
			assert.ErrorIs(t, err, redlock.ErrInvalid)
			var ee *Error
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, VarNodes, ee.Var)
			assert.Contains(t, err.Error(), VarNodes)
			assert.Contains(t, err.Error(), tt.shows)
			assertNoSecret(t, err, "pa55", "w0rd", "alice")
			assertNoSecret(t, ee.Value, "pa55", "w0rd", "alice")
		})
	}

	// A URL put into the wrong variable by mistake is masked too.
	_, err := Load(vars(map[string]string{VarTTL: "redis://:" + secret + "@127.0.0.1:6379"}))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), VarTTL)
	assertNoSecret(t, err)

	// Config.Open checks the URLs of a Config built by hand the same way.
	for _, u := range []string{"redis://:" + secret + "@127.0.0.1:6379", "redis://:" + url.PathEscape(secret) + "@127.0.0.1:6379/db"} {
		_, _, err = Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{u}}.Open()
		require.ErrorIs(t, err, redlock.ErrInvalid)
		assert.Contains(t, err.Error(), "xxxxx@127.0.0.1:6379")
		assertNoSecret(t, err)
	}
}

// Printing or logging a Config masks the user info of its nodes, with
// every fmt verb and with slog, and leaves the Config itself intact.
func TestConfigPrintingHidesPasswords(t *testing.T) {
	enc := url.PathEscape(secret)
	c := Config{Enabled: true, Strategy: StrategyRetry, TTL: 10 * time.Second, Retries: 3, RetryDelay: 100 * time.Millisecond,
		Nodes: []string{"redis://alice:" + enc + "@10.0.0.1:6379/0", "redis://:" + enc + "@10.0.0.2:6379", "redis://10.0.0.3:6379"}, Client: ClientRueidis}
	orig := slices.Clone(c.Nodes)
	assertNoSecret(t, c, "pa55", "w0rd", "alice")
	assertNoSecret(t, &c, "pa55", "w0rd", "alice")
	assert.Equal(t, orig, c.Nodes, "printing does not change the Config")

	assert.Equal(t, "enabled: strategy retry, ttl 10s, retries 3, retry delay 100ms, client rueidis, "+
		"nodes [redis://xxxxx@10.0.0.1:6379/0 redis://xxxxx@10.0.0.2:6379 redis://10.0.0.3:6379]", fmt.Sprint(c))
	assert.Equal(t, "{Enabled:true Strategy:retry TTL:10s Retries:3 RetryDelay:100ms "+
		"Nodes:[redis://xxxxx@10.0.0.1:6379/0 redis://xxxxx@10.0.0.2:6379 redis://10.0.0.3:6379] Client:rueidis}", fmt.Sprintf("%+v", c))
	assert.Equal(t, `envconfig.Config{Enabled:true, Strategy:"retry", TTL:10000000000, Retries:3, RetryDelay:100000000, `+
		`Nodes:[]string{"redis://xxxxx@10.0.0.1:6379/0", "redis://xxxxx@10.0.0.2:6379", "redis://10.0.0.3:6379"}, Client:"rueidis"}`, fmt.Sprintf("%#v", c))
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("lock config", "config", c)
	assert.Contains(t, logs.String(), `"config":{"enabled":true,"strategy":"retry","ttl":10000000000,"retries":3,"retry_delay":100000000,`+
		`"nodes":["redis://xxxxx@10.0.0.1:6379/0","redis://xxxxx@10.0.0.2:6379","redis://10.0.0.3:6379"],"client":"rueidis"}`)
}

// Every fmt verb prints a Config in a readable, safe form: %s and %v its
// String (no %!s(bool=true)), %q quoted, %+v its fields by name, %#v Go
// syntax; a verb that does not apply says so, with String.
func TestConfigPrintsWithEveryVerb(t *testing.T) {
	c := Config{Enabled: true, Strategy: StrategyReject, TTL: 30 * time.Second, Retries: 2, RetryDelay: 50 * time.Millisecond,
		Nodes: []string{"redis://:" + url.PathEscape(secret) + "@10.0.0.1:6379", "redis://10.0.0.2:6379?password=" + secret}, Client: ClientGoRedis}
	const want = "enabled: strategy reject, ttl 30s, retries 2, retry delay 50ms, client go-redis, " +
		"nodes [redis://xxxxx@10.0.0.1:6379 redis://10.0.0.2:6379?password=xxxxx]"
	assert.Equal(t, want, c.String())
	for verb, out := range map[string]string{
		"%s":   want,
		"%v":   want,
		"%q":   strconv.Quote(want),
		"%x":   fmt.Sprintf("%x", want),
		"%+v":  "{Enabled:true Strategy:reject TTL:30s Retries:2 RetryDelay:50ms Nodes:[redis://xxxxx@10.0.0.1:6379 redis://10.0.0.2:6379?password=xxxxx] Client:go-redis}",
		"%#v":  `envconfig.Config{Enabled:true, Strategy:"reject", TTL:30000000000, Retries:2, RetryDelay:50000000, Nodes:[]string{"redis://xxxxx@10.0.0.1:6379", "redis://10.0.0.2:6379?password=xxxxx"}, Client:"go-redis"}`,
		"%d":   "%!d(envconfig.Config=" + want + ")",
		"%.7s": "enabled",
	} {
		assert.Equal(t, out, fmt.Sprintf(verb, c), verb)
		assert.Equal(t, out, fmt.Sprintf(verb, &c), "%s of a *Config", verb)
		assert.NotContains(t, fmt.Sprintf(verb, c), "%!s", verb)
	}
	assertNoSecret(t, c)

	// Disabled says so first: every lock is granted, nothing is excluded.
	c.Enabled, c.Client = false, ""
	assert.Equal(t, "disabled: every lock is granted without Redis; strategy reject, ttl 30s, retries 2, retry delay 50ms, client go-redis, "+
		"nodes [redis://xxxxx@10.0.0.1:6379 redis://10.0.0.2:6379?password=xxxxx]", fmt.Sprintf("%s", c))
	assert.Equal(t, "disabled: every lock is granted without Redis; strategy , ttl 0s, retries 0, retry delay 0s, client go-redis, nodes []",
		Config{}.String())
}

// Nodes with a password that the server refuses: the Lock error and
// every observer event name the nodes by host:port, never with the
// password, whatever the real redis-server answers (one requires another
// password, the other has no user alice).
func TestNodeErrorsHidePasswords(t *testing.T) {
	c := redistest.Start(t, 2)
	addrs := c.Addrs()
	require.NoError(t, redistest.Client(t, addrs[0]).ConfigSet(t.Context(), "requirepass", "the-real-one").Err())
	enc := url.UserPassword("alice", secret).String()
	var logs bytes.Buffer
	var mu sync.Mutex
	var events []redlock.Event
	logger := redlock.SlogObserver(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	obs := redlock.Observer(func(e redlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
		logger(e)
	})
	for i, a := range addrs {
		cfg := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second,
			Nodes: []string{"redis://:" + url.PathEscape(secret) + "@" + a + "/1", "redis://" + enc + "@" + a}[i : i+1]}
		l, closer, err := cfg.Open(redlock.WithObserver(obs))
		require.NoError(t, err)
		_, err = l.Lock(t.Context(), "k")
		assert.ErrorIs(t, err, redlock.ErrUnavailable, "the password is refused")
		assert.Contains(t, err.Error(), a, "the node is named by its address")
		assertNoSecret(t, err, "pa55", "w0rd", "alice")
		require.NoError(t, closer.Close())
	}
	mu.Lock()
	defer mu.Unlock()
	assert.NotEmpty(t, logs.String())
	assertNoSecret(t, logs.String(), "pa55", "w0rd", "alice")
	require.NotEmpty(t, events)
	for _, e := range events {
		assertNoSecret(t, fmt.Sprintf("%+v %v", e, e.Err), "pa55", "w0rd", "alice")
	}
}
