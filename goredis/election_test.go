package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterElection: an election over the cluster alone and over a
// Redlock of the cluster and two masters, on a name without a hash tag
// (wrapped in braces on the cluster, where Leader reads the same slot): Leader reads
// the leader and its term, and a resignation hands over to a waiting
// campaign with a higher term.
func TestClusterElection(t *testing.T) {
	g, nodes := mixed(t)
	for name, ns := range map[string][]driver.Node{"single": {g}, "redlock": nodes} {
		t.Run(name, func(t *testing.T) {
			lk := newRedlock(t, ns)
			e, err := redlock.NewElection(lk, fresh("election"), redlock.WithTTL(time.Minute))
			require.NoError(t, err)
			a, err := e.Campaign(t.Context(), "a")
			require.NoError(t, err)
			who, err := e.Leader(t.Context())
			require.NoError(t, err)
			assert.Equal(t, redlock.Leader{Value: "a", Term: a.Term()}, who)

			won := make(chan *redlock.Leadership, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				b, err := e.Campaign(ctx, "b")
				assert.NoError(t, err)
				won <- b
			}()
			require.NoError(t, a.Resign(t.Context()))
			b := <-won
			require.NotNil(t, b)
			assert.Greater(t, b.Term(), a.Term())
			who, err = e.Leader(t.Context())
			require.NoError(t, err)
			assert.Equal(t, redlock.Leader{Value: "b", Term: b.Term()}, who)
			require.NoError(t, b.Resign(t.Context()))
		})
	}
}
