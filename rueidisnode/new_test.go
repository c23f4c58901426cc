package rueidisnode

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewRefuses: a nil client or option, a client in cluster mode
// without its options (miniredis answers CLUSTER SLOTS as a one-node
// cluster), a standalone client with a replica, options that break the
// adapter's guarantees or are not the client's, and a replica
// acknowledgement that cannot be met.
func TestNewRefuses(t *testing.T) {
	n, err := New(nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "nil")
	assert.Nil(t, n)

	m := miniredis.RunT(t)
	c := client(t, m.Addr(), single)
	_, err = New(c, nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "nil option")

	cluster := client(t, m.Addr())
	require.Equal(t, rueidis.ClientModeCluster, cluster.Mode())
	_, err = New(cluster)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "cluster without WithClientOption")

	replica := miniredis.RunT(t)
	withReplica := client(t, m.Addr(), single, func(o *rueidis.ClientOption) {
		o.Standalone.ReplicaAddress = []string{replica.Addr()}
		o.SendToReplicas = func(rueidis.Completed) bool { return false }
	})
	_, err = New(withReplica)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "replicas")

	for name, change := range map[string]func(*rueidis.ClientOption){
		"ConnLifetime":   func(o *rueidis.ClientOption) { o.ConnLifetime = time.Hour },
		"SendToReplicas": func(o *rueidis.ClientOption) { o.SendToReplicas = func(rueidis.Completed) bool { return false } },
		"ReplicaOnly":    func(o *rueidis.ClientOption) { o.ReplicaOnly = true },
		"sentinel":       func(o *rueidis.ClientOption) { o.Sentinel.MasterSet = "mymaster" },
		"no address":     func(o *rueidis.ClientOption) { o.InitAddress = nil },
	} {
		opt := clientOption([]string{m.Addr()}, single)
		change(&opt)
		_, err = New(c, WithClientOption(opt))
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
	for _, ack := range []Option{WithReplicaAck(0, time.Second), WithReplicaAck(1, time.Microsecond)} {
		_, err = New(c, ack)
		assert.ErrorIs(t, err, redlock.ErrInvalid, "replica acknowledgement")
	}

	n, err = New(c, WithClientOption(clientOption([]string{m.Addr()}, single)), WithReplicaAck(1, time.Second))
	require.NoError(t, err)
	assert.Equal(t, driver.Info{Name: m.Addr(), ReplicaAck: true}, n.Info(), "a standalone node keeps its address as its name")
}

// TestNames: a standalone node is named after its address; databases of
// one server are one node, since they share its fate, so a Redlock
// refuses them as duplicates. A cluster node is named after its seeds,
// sorted and without repetitions.
func TestNames(t *testing.T) {
	m := miniredis.RunT(t)
	db := func(n int) driver.Node {
		return serverNode(t, m.Addr(), single, func(o *rueidis.ClientOption) { o.SelectDB = n })
	}
	n0, n2 := db(0), db(2)
	assert.Equal(t, m.Addr(), n0.Info().Name)
	assert.Equal(t, m.Addr(), n2.Info().Name)
	_, err := redlock.New([]driver.Node{n0, n2, db(3)})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "three databases of one server are not three independent masters")

	cl := described(t, clientOption([]string{m.Addr(), m.Addr()}))
	assert.Equal(t, driver.Info{Name: "cluster[" + m.Addr() + "]", Cluster: true}, cl.Info())
}
