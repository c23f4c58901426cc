package envconfig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLib is a client library for OpenWith that records the nodes it
// opens and the closers they were given, opening each with go-redis
// underneath, wrapped in a fakenode so the test sees its calls.
type fakeLib struct {
	mu     sync.Mutex
	opened []Node
	nodes  []*fakenode.Node
	closed int
	fail   func(Node) error // refuses a node when it returns an error
}

func (f *fakeLib) client() Client {
	return Client{Name: ClientRueidis, OpenNode: func(n Node) (driver.Node, io.Closer, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.opened = append(f.opened, n)
		if f.fail != nil {
			if err := f.fail(n); err != nil {
				return nil, nil, err
			}
		}
		b, cl, err := openGoRedis(n)
		if err != nil {
			return nil, nil, err
		}
		fn := fakenode.Wrap(b)
		f.nodes = append(f.nodes, fn)
		return fn, closeFunc(func() error {
			f.mu.Lock()
			f.closed++
			f.mu.Unlock()
			return cl.Close()
		}), nil
	}}
}

func (f *fakeLib) counts() (opened, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.opened), f.closed
}

func enabled(client string, nodes ...string) Config {
	return Config{Enabled: true, Strategy: StrategyReject, TTL: time.Minute, Nodes: nodes, Client: client}
}

// TestClientRueidisNotLinked: Open (go-redis only) refuses a Config that
// asks for rueidis, enabled or not, with an *Error for CLIENT naming the
// package to open it with.
func TestClientRueidisNotLinked(t *testing.T) {
	for _, c := range []Config{enabled(ClientRueidis, "redis://127.0.0.1:1"), {Strategy: StrategyRetry, TTL: time.Second, Client: ClientRueidis}} {
		_, _, err := c.Open()
		require.Error(t, err)
		assert.ErrorIs(t, err, redlock.ErrInvalid)
		var ee *Error
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, VarClient, ee.Var)
		assert.Contains(t, err.Error(), "github.com/quorumlock/redlock/rueidisnode/rueidisenv", "names the import")
	}
	// An OpenWith for another library does not open rueidis either.
	_, _, err := enabled(ClientRueidis, "redis://127.0.0.1:1").OpenWith(Client{Name: "other", OpenNode: openGoRedis})
	assert.ErrorIs(t, err, redlock.ErrInvalid)
}

// TestClientOpenWith: a Config for the library opens every node with it,
// parsed; the locker runs on its backends, and the Closer closes each of
// its clients once.
func TestClientOpenWith(t *testing.T) {
	mr1, mr2 := miniredis.RunT(t), miniredis.RunT(t)
	var lib fakeLib
	c := enabled(ClientRueidis, "redis://"+mr1.Addr()+"/1?dial_timeout=2s", "redis://"+mr2.Addr()+"/2")
	l, closer, err := c.OpenWith(lib.client())
	require.NoError(t, err)
	require.Len(t, lib.opened, 2)
	assert.Equal(t, 1, lib.opened[0].Standalone.DB)
	assert.Equal(t, 2*time.Second, lib.opened[0].Standalone.DialTimeout)
	assert.Equal(t, []string{"dial_timeout"}, lib.opened[0].Params)
	assert.True(t, lib.opened[1].Standalone.ContextTimeoutEnabled)

	lk, err := l.Lock(t.Context(), "k")
	require.NoError(t, err)
	require.NoError(t, lk.Unlock(t.Context()))
	for _, n := range lib.nodes {
		assert.Equal(t, 1, n.Calls(fakenode.Acquire), "the locker runs on the library's nodes")
	}
	require.NoError(t, closer.Close())
	require.NoError(t, closer.Close())
	_, closed := lib.counts()
	assert.Equal(t, 2, closed, "each client closed once")
}

// TestClientOpenWithGoRedisConfig: a Config for go-redis (the default, or
// an empty Client) never calls the other library.
func TestClientOpenWithGoRedisConfig(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, name := range []string{ClientGoRedis, ""} {
		var lib fakeLib
		l, closer, err := enabled(name, "redis://"+mr.Addr()).OpenWith(lib.client())
		require.NoError(t, err)
		lk, err := l.Lock(t.Context(), "k")
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(t.Context()))
		require.NoError(t, closer.Close())
		opened, _ := lib.counts()
		assert.Zero(t, opened, "Client %q", name)
	}
}

// TestClientOpenWithFailure: a node the library cannot open closes the
// clients already made. A refusal (Node.Invalid) is returned as is; any
// other error (a node that cannot be reached) is wrapped with the masked
// URL and does not match ErrInvalid.
func TestClientOpenWithFailure(t *testing.T) {
	mr := miniredis.RunT(t)
	pw := "alice:" + url.PathEscape(secret) + "@"
	unreachable := errors.New("dial tcp: connection refused")
	for _, tt := range []struct {
		name    string
		err     func(Node) error
		invalid bool
	}{
		{"refused", func(n Node) error { return n.Invalid(errors.New("option not supported")) }, true},
		{"unreachable", func(Node) error { return unreachable }, false},
		{"unreachable, quoting the URL", func(n Node) error {
			return fmt.Errorf("dial redis://alice:%s@%s/2: %w", url.PathEscape(secret), n.Standalone.Addr, unreachable)
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lib := fakeLib{fail: func(n Node) error {
				if n.Standalone.DB == 2 {
					return tt.err(n)
				}
				return nil
			}}
			_, _, err := enabled(ClientRueidis, "redis://"+mr.Addr()+"/1", "redis://"+pw+mr.Addr()+"/2").OpenWith(lib.client())
			require.Error(t, err)
			assert.Equal(t, tt.invalid, errors.Is(err, redlock.ErrInvalid), "%v", err)
			assert.Contains(t, err.Error(), "redis://xxxxx@"+mr.Addr()+"/2", "the node, masked")
			assertNoSecret(t, err, "pa55", "w0rd", "alice")
			if !tt.invalid {
				assert.ErrorIs(t, err, unreachable)
			}
			opened, closed := lib.counts()
			assert.Equal(t, 2, opened)
			assert.Equal(t, 1, closed, "the first node's client is closed")
		})
	}
}

// TestClientBadInput: an unknown library in a Config built by hand, and a
// Client for OpenWith without a name, named go-redis or without OpenNode,
// are ErrInvalid.
func TestClientBadInput(t *testing.T) {
	_, _, err := enabled("redigo", "redis://127.0.0.1:1").Open()
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	for _, lib := range []Client{{}, {Name: ClientGoRedis, OpenNode: openGoRedis}, {Name: ClientRueidis}} {
		_, _, err := enabled(ClientRueidis, "redis://127.0.0.1:1").OpenWith(lib)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "%+v", lib.Name)
	}
}

// TestNodePrintingHidesPasswords: a Node holds the password in its
// options; printing it shows the masked URL only.
func TestNodePrintingHidesPasswords(t *testing.T) {
	for _, u := range []string{
		"redis://alice:" + url.PathEscape(secret) + "@h:1",
		"redis+sentinel://alice:" + url.PathEscape(secret) + "@s?master_name=m",
		"redis+cluster://alice:" + url.PathEscape(secret) + "@h:1",
	} {
		n, err := parseNode(u)
		require.NoError(t, err)
		assertNoSecret(t, n, "pa55", "w0rd", "alice")
		assertNoSecret(t, &n, "pa55", "w0rd", "alice")
		assert.Contains(t, n.String(), "xxxxx@")
	}
}
