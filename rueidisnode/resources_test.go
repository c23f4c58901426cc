package rueidisnode

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One configuration, one behaviour: a password the server does not
// require, or the right one, works for every primitive; a wrong or
// missing one fails at rueidis.NewClient, which authenticates as it
// connects, naming the server's refusal.
func TestOneBehaviourPerAuthConfiguration(t *testing.T) {
	addrs := redistest.Start(t, 2).Addrs()
	open, protected := addrs[0], addrs[1]
	require.NoError(t, redistest.Client(t, protected).ConfigSet(t.Context(), "requirepass", "the-real-one").Err())

	tests := []struct {
		name, addr, user, password string
		refusal                    string // "" when every primitive must succeed
	}{
		{"password not required", open, "", "not-needed", ""},
		{"user and password not required", open, "default", "not-needed", ""},
		{"right password", protected, "", "the-real-one", ""},
		{"wrong password", protected, "", "s3cr3t-x", "WRONGPASS"},
		{"missing password", protected, "", "", "NOAUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := rueidis.NewClient(clientOption([]string{tt.addr}, func(o *rueidis.ClientOption) {
				o.Username, o.Password = tt.user, tt.password
			}))
			if tt.refusal != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.refusal)
				assert.NotContains(t, err.Error(), "s3cr3t")
				return
			}
			require.NoError(t, err)
			defer c.Close()
			r := newSingle(t, adapt(t, c), redlock.WithStrategy(redlock.Reject()), redlock.WithTTL(2*time.Second))
			for i, p := range locktest.Primitives {
				assert.NoError(t, p.Use(t.Context(), r, fmt.Sprintf("auth:%s:%d", t.Name(), i)), p.Name)
			}
		})
	}
}

// Closing the rueidis client leaves no connection open on the server,
// after every primitive was used: CLIENT LIST shows only the test's own.
func TestClientCloseLeavesNoConnection(t *testing.T) {
	addr := redistest.Start(t, 1).Addrs()[0]
	admin := redistest.Client(t, addr)
	c, err := rueidis.NewClient(clientOption([]string{addr}))
	require.NoError(t, err)
	r := newSingle(t, adapt(t, c), redlock.WithStrategy(redlock.Reject()), redlock.WithTTL(2*time.Second))
	for i, p := range locktest.Primitives {
		require.NoError(t, p.Use(t.Context(), r, fmt.Sprintf("close:%d", i)), p.Name)
	}
	require.NotEmpty(t, redistest.OtherClients(t, admin), "the node had connections open")

	c.Close()
	testwait.Until(t, "no connection left after Close", func() bool {
		return len(redistest.OtherClients(t, admin)) == 0
	})
	runtime.KeepAlive(c) // unreachable, its sockets would be closed by the runtime
}
