package goredis

import (
	"testing"

	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/badnode"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/respguard"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

var probe = driver.NewScript("probe", `return 1`)

// New guards the connections of every client it adapts: a length of
// 2^63-1 ends the connection with the guard's error, not a panic in
// go-redis's reader, on a standalone client and on each node a cluster
// client creates.
func TestNewGuardsEveryConnection(t *testing.T) {
	bad := badnode.Start(t, badnode.HugeBulk)
	clients := map[string]redis.UniversalClient{
		"standalone": redistest.Client(t, bad.Addr()),
		"cluster":    redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{bad.Addr()}, ContextTimeoutEnabled: true}),
	}
	for name, c := range clients {
		n := adapt(t, c)
		// A cluster client asks the seed for its slots (the guard
		// refuses that answer, then the client sends to the seed).
		_, err := n.Eval(t.Context(), probe, []string{"k"})
		var refused *respguard.Error
		assert.ErrorAs(t, err, &refused, name)
		assert.ErrorContains(t, err, "a string of 9223372036854775807 bytes", name)
		_ = n.Close()
		_ = c.Close()
	}
}
