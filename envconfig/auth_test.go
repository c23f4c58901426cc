package envconfig

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One configuration, one behaviour: a node's URL and its server's password
// give the same answer to every primitive and to Ping. A password that the
// server does not require is accepted by all of them (go-redis
// authenticates in its greeting, as Redis allows); a wrong or missing one
// fails all of them, each naming the server's refusal.
func TestOneBehaviourPerAuthConfiguration(t *testing.T) {
	addrs := redistest.Start(t, 2).Addrs()
	open, protected := addrs[0], addrs[1]
	require.NoError(t, redistest.Client(t, protected).ConfigSet(t.Context(), "requirepass", "the-real-one").Err())

	tests := []struct {
		name, url string
		refusal   string // "" when every primitive must succeed
	}{
		{"password not required", "redis://:not-needed@" + open, ""},
		{"user and password not required", "redis://default:not-needed@" + open, ""},
		{"right password", "redis://:the-real-one@" + protected, ""},
		{"wrong password", "redis://:s3cr3t-x@" + protected, "WRONGPASS"},
		// Redis answers a long unauthenticated command with a protocol
		// error and closes the connection: the adapter names the error
		// NOAUTH, and the next command on that connection reads EOF,
		// which it names too.
		{"missing password", "redis://" + protected, "NOAUTH|closed the connection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, clients, err := Config{Enabled: true, Strategy: StrategyReject, TTL: 2 * time.Second, Nodes: []string{tt.url}}.Open()
			require.NoError(t, err)
			defer clients.Close()

			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			answers := map[string]error{"Ping": clients.Ping(ctx)}
			for i, p := range locktest.Primitives {
				answers[p.Name] = p.Use(ctx, r, fmt.Sprintf("auth:%s:%d", t.Name(), i))
			}
			for name, err := range answers {
				if tt.refusal == "" {
					assert.NoError(t, err, name)
					continue
				}
				if assert.Error(t, err, name) {
					assert.Regexp(t, tt.refusal, err.Error(), "%s names the server's refusal", name)
					assert.NotContains(t, err.Error(), "s3cr3t", "%s shows no password", name)
				}
			}
		})
	}
}

// Clients.Close leaves no connection open on a node, after every
// primitive was used through the Redlock that Open returned: CLIENT LIST
// shows only the test's own.
func TestClientsCloseLeavesNoConnection(t *testing.T) {
	addr := redistest.Start(t, 1).Addrs()[0]
	admin := redistest.Client(t, addr)
	r, clients, err := Config{Enabled: true, Strategy: StrategyReject, TTL: 2 * time.Second, Nodes: []string{"redis://" + addr}}.Open()
	require.NoError(t, err)
	for i, p := range locktest.Primitives {
		require.NoError(t, p.Use(t.Context(), r, fmt.Sprintf("close:%d", i)), p.Name)
	}
	require.NotEmpty(t, redistest.OtherClients(t, admin), "the node had connections open")

	require.NoError(t, clients.Close())
	testwait.Until(t, "no connection left after Clients.Close", func() bool {
		return len(redistest.OtherClients(t, admin)) == 0
	})
	runtime.KeepAlive(clients) // unreachable, its sockets would be closed by the runtime
}
