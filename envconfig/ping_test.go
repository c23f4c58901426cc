package envconfig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openClients opens an enabled Config over nodes (Open contacts none of
// them) and closes its Clients when the test ends.
func openClients(t *testing.T, nodes ...string) *Clients {
	t.Helper()
	_, clients, err := Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: nodes}.Open()
	require.NoError(t, err)
	t.Cleanup(func() { clients.Close() })
	return clients
}

// closedPort is the address of a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	p, err := freeport.Get()
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
}

// silentListener accepts connections and never answers: a node that
// hangs. It is closed, with its connections, when the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// Against real redis-server processes Ping answers nil: one node, three,
// and a node whose server requires the password its URL gives.
func TestPingRealNodes(t *testing.T) {
	addrs := redistest.Start(t, 3).Addrs()
	require.NoError(t, redistest.Client(t, addrs[2]).ConfigSet(t.Context(), "requirepass", secret).Err())
	withPassword := "redis://:" + url.PathEscape(secret) + "@" + addrs[2] + "/1"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	assert.NoError(t, openClients(t, "redis://"+addrs[0]).Ping(ctx))
	assert.NoError(t, openClients(t, "redis://"+addrs[0], "redis://"+addrs[1], withPassword).Ping(ctx))
	assert.NoError(t, openClients(t, "redis://"+addrs[1]+"?dial_timeout=1s&read_timeout=1s").Ping(ctx))
}

// A node that does not answer fails Ping with a *PingError that names it
// (masked) and its cause in words an operator acts on: a closed port, a
// wrong password, a password missing, a rediss:// URL to a server without
// TLS, a server that never answers.
func TestPingCauses(t *testing.T) {
	addrs := redistest.Start(t, 2).Addrs()
	plain, locked := addrs[0], addrs[1]
	require.NoError(t, redistest.Client(t, locked).ConfigSet(t.Context(), "requirepass", "the-real-one").Err())
	closed, silent := closedPort(t), silentListener(t)
	wrong := url.PathEscape(secret)

	for _, tt := range []struct {
		name, url, node, cause string
		timeout                time.Duration
	}{
		{"closed port", "redis://" + closed, "redis://" + closed, CauseRefused, 5 * time.Second},
		{"wrong password", "redis://:" + wrong + "@" + locked, "redis://xxxxx@" + locked, CauseAuth, 5 * time.Second},
		{"wrong user and password", "redis://alice:" + wrong + "@" + locked + "/0", "redis://xxxxx@" + locked + "/0", CauseAuth, 5 * time.Second},
		{"no password", "redis://" + locked, "redis://" + locked, CauseAuth, 5 * time.Second},
		{"TLS to a server without", "rediss://:" + wrong + "@" + plain, "rediss://xxxxx@" + plain, CauseTLS, 5 * time.Second},
		{"no answer", "redis://:" + wrong + "@" + silent, "redis://xxxxx@" + silent, CauseTimeout, 300 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), tt.timeout)
			defer cancel()
			start := time.Now()
			err := openClients(t, tt.url).Ping(ctx)
			require.Error(t, err)
			assert.Less(t, time.Since(start), tt.timeout+2*time.Second, "Ping is bounded by its context")
			var pe *PingError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tt.node, pe.Node)
			assert.Equal(t, tt.cause, pe.Cause, "%v", err)
			assert.True(t, strings.HasPrefix(err.Error(), "envconfig: node "+strconv.Quote(tt.node)+": "+tt.cause+": "), err.Error())
			assertNoSecret(t, err, "pa55", "w0rd", "alice")
		})
	}
}

// A TLS endpoint that is not Redis: a rediss:// URL fails the handshake
// on its certificate (no CA given), and a redis:// URL finds the
// connection closed, as by a Redis that requires TLS.
func TestPingTLSServer(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes it refuses
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	for _, tt := range []struct{ url, cause string }{
		{"rediss://" + addr, CauseTLS},
		{"redis://" + addr, CauseClosed},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := openClients(t, tt.url).Ping(ctx)
		cancel()
		var pe *PingError
		require.ErrorAs(t, err, &pe, tt.url)
		assert.Equal(t, tt.cause, pe.Cause, "%v", err)
	}
}

// Several nodes: one *PingError per node that did not answer, in the
// order of the Config's nodes, joined; the node that answered is not
// mentioned. Disabled Clients have nothing to check.
func TestPingSeveralNodes(t *testing.T) {
	addrs := redistest.Start(t, 2).Addrs()
	require.NoError(t, redistest.Client(t, addrs[1]).ConfigSet(t.Context(), "requirepass", "the-real-one").Err())
	closed := closedPort(t)
	clients := openClients(t, "redis://:"+url.PathEscape(secret)+"@"+addrs[1], "redis://"+addrs[0], "redis://"+closed)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := clients.Ping(ctx)
	require.Error(t, err)
	var causes []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var pe *PingError
		require.ErrorAs(t, e, &pe)
		causes = append(causes, pe.Node+": "+pe.Cause)
	}
	assert.Equal(t, []string{"redis://xxxxx@" + addrs[1] + ": " + CauseAuth, "redis://" + closed + ": " + CauseRefused}, causes)
	assert.NotContains(t, err.Error(), addrs[0])
	assertNoSecret(t, err)

	_, disabled, err := Config{Strategy: StrategyRetry, TTL: time.Second, Nodes: []string{"redis://" + closed}}.Open()
	require.NoError(t, err)
	assert.NoError(t, disabled.Ping(ctx))
	var none *Clients
	assert.NoError(t, none.Ping(ctx))
}

// pingCause names each kind of failure, wrapped as go-redis wraps it.
func TestPingCauseNames(t *testing.T) {
	for err, want := range map[error]string{
		&tlsError{context.DeadlineExceeded}:                    CauseTLS,
		&net.OpError{Op: "dial", Err: errors.New("x")}:         CauseOther,
		&net.DNSError{Err: "no such host", Name: "h"}:          CauseHost,
		context.DeadlineExceeded:                               CauseTimeout,
		fmt.Errorf("read: %w", io.ErrUnexpectedEOF):            CauseClosed,
		errors.New("ERR unknown command 'HELLO'"):              CauseOther,
		errors.New("WRONGPASS invalid username-password pair"): CauseOther, // not a server reply
	} {
		assert.Equal(t, want, pingCause(err), "%v", err)
	}
}
