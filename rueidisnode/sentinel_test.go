package rueidisnode

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/backendtest"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sentinelOption is the options of a rueidis client of the master that
// the sentinels at sentinels monitor.
func sentinelOption(sentinels []string, change ...func(*rueidis.ClientOption)) rueidis.ClientOption {
	return clientOption(sentinels, append([]func(*rueidis.ClientOption){func(o *rueidis.ClientOption) {
		o.Sentinel.MasterSet = redisserver.MasterName
	}}, change...)...)
}

// sentinelNode is the rueidis node of a fresh sentinel client.
func sentinelNode(t *testing.T, topo *redisserver.Sentinel) *node {
	t.Helper()
	b := described(t, sentinelOption(topo.SentinelAddrs()))
	n, ok := b.(*node)
	require.True(t, ok, "a sentinel client makes a node, got %T", b)
	return n
}

// TestSentinel runs the adapter over a master, its replica and three
// sentinels, shared by the subtests that leave the topology as it is.
func TestSentinel(t *testing.T) {
	topo := redistest.StartSentinel(t)
	t.Run("Name", func(t *testing.T) { sentinelName(t, topo) })
	t.Run("Conformance", func(t *testing.T) { sentinelConformance(t, topo) })
}

// sentinelName: the node is named after the master and its sentinels, as
// goredis names a failover client's node, so that a Redlock refuses the
// two as one node; without WithClientOption, or with options that do not
// suit a lock, a sentinel client is refused.
func sentinelName(t *testing.T, topo *redisserver.Sentinel) {
	addrs := topo.SentinelAddrs()
	r := described(t, sentinelOption([]string{addrs[2], addrs[0], addrs[1]}))
	fo := &redis.FailoverOptions{MasterName: redisserver.MasterName, SentinelAddrs: addrs}
	g, err := goredis.New(redistest.FailoverClient(t, addrs...), goredis.WithFailover(fo))
	require.NoError(t, err)
	assert.Equal(t, "sentinel"+sortedList(addrs, "["+redisserver.MasterName+"@", "]"), r.Name())
	assert.Equal(t, g.Name(), r.Name(), "one master, one name, whichever the adapter")
	standalone := adapt(t, client(t, redistest.Start(t, 1).Addrs()[0]))
	_, err = redlock.New([]redlock.Backend{r, g, standalone})
	assert.ErrorIs(t, err, redlock.ErrInvalid, "two clients of one master are one node")

	_, err = New(newClient(t, sentinelOption(addrs)))
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a sentinel client without WithClientOption")
	for name, change := range map[string]func(*rueidis.ClientOption){
		"ConnLifetime":  func(o *rueidis.ClientOption) { o.ConnLifetime = time.Hour },
		"ReplicaOnly":   func(o *rueidis.ClientOption) { o.ReplicaOnly = true },
		"no master set": func(o *rueidis.ClientOption) { o.Sentinel.MasterSet = "" },
	} {
		opt := sentinelOption(addrs)
		change(&opt)
		_, err := New(newClient(t, sentinelOption(addrs)), WithClientOption(opt))
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
	}
}

// sentinelConformance runs the suite over the sentinel node. Stall
// pauses every process, the sentinels first so that no failover starts:
// the node stops answering.
func sentinelConformance(t *testing.T, topo *redisserver.Sentinel) {
	backendtest.Run(t, func(t *testing.T) backendtest.Target {
		return backendtest.Target{
			Backend: sentinelNode(t, topo),
			Stall: func() func() {
				for i := len(topo.Servers) - 1; i >= 0; i-- {
					if err := topo.Servers[i].Pause(); err != nil {
						t.Fatal(err)
					}
				}
				return func() {
					for _, s := range topo.Servers {
						if err := s.Resume(); err != nil {
							t.Error(err)
						}
					}
				}
			},
		}
	})
}

// TestSentinelFollowsFailover: the node is the master whichever server it
// is: after the master dies and the sentinels promote the replica, locks
// taken through the same node land on the new master, and a waiter
// subscribed before the failover is told that a release may have been
// missed once its subscription is active on the new master, and then
// hears releases there.
func TestSentinelFollowsFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	topo := redistest.StartSentinel(t)
	n := sentinelNode(t, topo)
	heard := make(chan string, 16)
	stop, err := n.Notify(ctx, "sentinel:waited", func(p string) {
		select {
		case heard <- p:
		default:
		}
	})
	require.NoError(t, err)
	defer stop()

	master, replica := topo.Data[0], topo.Data[1]
	require.NoError(t, master.Kill())
	addr, err := topo.WaitFailover(ctx, master.Addr())
	require.NoError(t, err)
	require.Equal(t, replica.Addr(), addr, "the replica is the new master")

	testwait.Until(t, "a lock granted after the failover", func() bool {
		ok, err := n.Acquire(ctx, "sentinel:after", "tok", time.Minute)
		return err == nil && ok
	})
	assert.Equal(t, "tok", redistest.Client(t, replica.Addr()).Get(ctx, "sentinel:after").Val(), "on the new master")
	select {
	case p := <-heard:
		assert.Empty(t, p, "a release may have been missed: payload \"\"")
	case <-ctx.Done():
		t.Fatal("the waiter was not told that its subscription moved")
	}
	ok, err := n.Acquire(ctx, "sentinel:waited", "tok2", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = n.Release(ctx, "sentinel:waited", "tok2", true)
	require.NoError(t, err)
	require.True(t, ok)
	for {
		select {
		case p := <-heard:
			if p == "tok2" {
				return // the subscription is active on the new master
			}
		case <-ctx.Done():
			t.Fatal("the release on the new master was not heard")
		}
	}
}
