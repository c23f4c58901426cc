package goredis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/hashslot"
	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Redis Cluster fault scenarios: each starts a cluster of its own,
// since it kills or reshapes it. Waits are bounded polls; no absolute time
// is asserted, only the order of events against a lock's validity.

// faultTTL is long enough that a failover (node timeout 1 s, then an
// election) ends well within a lock's validity.
const faultTTL = 30 * time.Second

// faultCluster starts a cluster of 3 masters with replicas replicas each,
// tuned for failovers (tuneForFailover).
func faultCluster(t *testing.T, replicas int, anyReplica bool) *redisserver.Cluster {
	t.Helper()
	c := redistest.StartCluster(t, 3, replicas)
	tuneForFailover(t, c.Addrs(), anyReplica)
	return c
}

// tuneForFailover gives the cluster's nodes a node timeout of 1 s (a
// failover within a few seconds) and, when anyReplica is set, a replica
// validity factor of 0: a replica that lost contact with its master may
// still be promoted.
func tuneForFailover(t *testing.T, addrs []string, anyReplica bool) {
	t.Helper()
	for _, addr := range addrs {
		r := redistest.Client(t, addr)
		require.NoError(t, r.ConfigSet(t.Context(), "cluster-node-timeout", "1000").Err())
		if anyReplica {
			require.NoError(t, r.ConfigSet(t.Context(), "cluster-replica-validity-factor", "0").Err())
		}
	}
}

// clusterFaults is what the failover scenarios do to a cluster's nodes,
// by address: redis-server processes (processFaults) or compose
// containers (topology_docker_test.go).
type clusterFaults interface {
	Addrs() []string
	kill(t *testing.T, addr string)
	pause(t *testing.T, addr string)
	resume(t *testing.T, addr string)
	running() []string // the nodes not killed
}

// processFaults drives a cluster of redis-server processes.
type processFaults struct{ *redisserver.Cluster }

func (p processFaults) kill(t *testing.T, addr string)  { require.NoError(t, p.ServerAt(addr).Kill()) }
func (p processFaults) pause(t *testing.T, addr string) { require.NoError(t, p.ServerAt(addr).Pause()) }
func (p processFaults) resume(t *testing.T, addr string) {
	require.NoError(t, p.ServerAt(addr).Resume())
}
func (p processFaults) running() []string {
	var addrs []string
	for _, s := range p.Servers {
		if s.Running() {
			addrs = append(addrs, s.Addr())
		}
	}
	return addrs
}

// owner returns the master serving slot s, and, when withReplica is
// set, its replica, waiting until CLUSTER SLOTS lists one.
func owner(t *testing.T, cc *redis.ClusterClient, s uint16, withReplica bool) (master, replica string) {
	t.Helper()
	eventually(t, 10*time.Second, "the owner of the slot (and its replica) listed", func() bool {
		slots, err := cc.ClusterSlots(t.Context()).Result()
		require.NoError(t, err)
		for _, r := range slots {
			if int(s) >= r.Start && int(s) <= r.End {
				master = r.Nodes[0].Addr
				if len(r.Nodes) > 1 {
					replica = r.Nodes[1].Addr
				}
			}
		}
		return master != "" && (replica != "" || !withReplica)
	})
	return master, replica
}

// readOnly returns a client of one cluster node that reads keys even on a
// replica (READONLY on every connection).
func readOnly(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: time.Second, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.ReadOnly(ctx).Err()
		}})
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls f every 50 ms until it returns true, for at most limit.
func eventually(t *testing.T, limit time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPromoted waits until replica reports itself a master and every
// server still running reports cluster_state:ok and no longer names dead
// as a master of any slot.
func waitPromoted(t *testing.T, c clusterFaults, replica, dead string) {
	t.Helper()
	ctx := t.Context()
	r := readOnly(t, replica)
	eventually(t, 30*time.Second, "the replica "+replica+" promoted", func() bool {
		role, err := r.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
	for _, addr := range c.running() {
		n := readOnly(t, addr)
		eventually(t, 30*time.Second, addr+" sees the new topology", func() bool {
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
			nodes, err := n.ClusterNodes(ctx).Result()
			if err != nil {
				return false
			}
			for line := range strings.Lines(nodes) {
				if strings.Contains(line, dead) && strings.Contains(line, "master") && !strings.Contains(line, "fail") {
					return false
				}
			}
			return true
		})
	}
}

// cutSlotReplication freezes replica (SIGSTOP) and drops the replication
// links of its master, so no write of master's reaches it from now on:
// the frozen replica cannot reconnect, and what master writes next is in
// no socket buffer of the replica's, to be read when it resumes.
func cutSlotReplication(t *testing.T, c clusterFaults, master, replica string) {
	t.Helper()
	c.pause(t, replica)
	require.NoError(t, redistest.Client(t, master).Do(t.Context(), "CLIENT", "KILL", "TYPE", "replica").Err())
}

// untilAnswered calls lock until it fails with something other than
// ErrUnavailable (the cluster still down, or the client's view of it out
// of date), or succeeds, and returns that outcome.
func untilAnswered(t *testing.T, what string, lock func() (*redlock.Lock, error)) (*redlock.Lock, error) {
	t.Helper()
	var (
		l   *redlock.Lock
		err error
	)
	eventually(t, 20*time.Second, what+" answered", func() bool {
		l, err = lock()
		return !errors.Is(err, redlock.ErrUnavailable)
	})
	return l, err
}

// failoverSetup is what both failover scenarios start from: A's locks on
// two keys of one slot, one through a Single over the cluster node, one
// through a Redlock of the cluster node and two standalone masters, and
// B's lockers of the same kinds over a client of its own.
type failoverSetup struct {
	c                  clusterFaults
	single, redlockKey string // the keys (with a hash tag: used as is)
	aSingle, aRedlock  *redlock.Redlock
	bSingle, bRedlock  *redlock.Redlock
	ccA                *redis.ClusterClient
}

func newFailoverSetup(t *testing.T, c clusterFaults) *failoverSetup {
	standalone := redistest.Start(t, 2).Addrs()
	tag := fresh("fo")
	f := &failoverSetup{c: c, single: "single:{" + tag + "}", redlockKey: "redlock:{" + tag + "}"}
	lockers := func(cc *redis.ClusterClient) (*redlock.Redlock, *redlock.Redlock) {
		g := adapt(t, cc)
		opts := []redlock.Option{redlock.WithTTL(faultTTL), redlock.WithStrategy(redlock.Reject())}
		return newSingle(t, g, opts...), newRedlock(t, []driver.Node{g,
			adapt(t, redistest.Client(t, standalone[0])), adapt(t, redistest.Client(t, standalone[1]))}, opts...)
	}
	f.ccA = redistest.ClusterClient(t, c.Addrs()...)
	f.aSingle, f.aRedlock = lockers(f.ccA)
	f.bSingle, f.bRedlock = lockers(redistest.ClusterClient(t, c.Addrs()...))
	return f
}

// TestClusterFailoverReplicaHadTheKey is also the regression test of the
// slot map reload after a failed call (Node.run): without it, B's and A's
// calls kept going to the dead master for ClusterStateReloadInterval
// (60 s).
//
// The master owning a held lock's slot is killed after replication
// carried the key, and its replica is
// promoted. During the failover the holder's calls through the cluster
// alone fail as ErrUnavailable (never ErrNotHeld), while the Redlock
// extends on its standalone majority; afterwards the promoted replica
// holds the holder's token: the next client is refused, the holder
// extends and unlocks, and then the next client gets the lock.
func TestClusterFailoverReplicaHadTheKey(t *testing.T) {
	clusterFailoverReplicaHadTheKey(t, newFailoverSetup(t, processFaults{faultCluster(t, 1, false)}))
}

func clusterFailoverReplicaHadTheKey(t *testing.T, f *failoverSetup) {
	ctx := t.Context()
	la, err := f.aSingle.Lock(ctx, f.single)
	require.NoError(t, err)
	lr, err := f.aRedlock.Lock(ctx, f.redlockKey)
	require.NoError(t, err)

	master, replica := owner(t, f.ccA, hashslot.Of(f.single), true)
	require.NotEmpty(t, replica)
	rep := readOnly(t, replica)
	eventually(t, 10*time.Second, "the replica has both keys", func() bool {
		return rep.Get(ctx, f.single).Val() == la.Token() && rep.Get(ctx, f.redlockKey).Val() == lr.Token()
	})
	f.c.kill(t, master)

	// The failover window: the slot is served by nobody.
	err = la.Extend(ctx, faultTTL)
	if err != nil {
		assert.ErrorIs(t, err, redlock.ErrUnavailable, "the Single, while its master is dead")
		assert.NotErrorIs(t, err, redlock.ErrNotHeld)
	}
	require.NoError(t, lr.Extend(ctx, faultTTL), "the Redlock extends on the standalone majority")
	_, err = f.bRedlock.Lock(ctx, f.redlockKey)
	assert.ErrorIs(t, err, redlock.ErrNotAcquired, "B's Redlock, during the failover")

	waitPromoted(t, f.c, replica, master)
	assert.Equal(t, la.Token(), rep.Get(ctx, f.single).Val(), "the promoted replica holds A's key")

	_, err = untilAnswered(t, "B's Single", func() (*redlock.Lock, error) { return f.bSingle.Lock(ctx, f.single) })
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "B is refused while A's validity lasts")
	require.True(t, time.Now().Before(la.Until()))
	_, err = f.bRedlock.Lock(ctx, f.redlockKey)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)

	// A's client may still route to the dead master for a call or two.
	eventually(t, 20*time.Second, "A extends its Single on the promoted replica", func() bool {
		err := la.Extend(ctx, faultTTL)
		if err != nil {
			assert.ErrorIs(t, err, redlock.ErrUnavailable)
		}
		return err == nil
	})
	require.NoError(t, lr.Extend(ctx, faultTTL))
	assert.Greater(t, rep.PTTL(ctx, f.single).Val(), faultTTL/2, "extended on the promoted replica")
	require.NoError(t, la.Unlock(ctx))
	require.NoError(t, lr.Unlock(ctx))

	lb, err := f.bSingle.Lock(ctx, f.single)
	require.NoError(t, err, "B gets the Single once A released it")
	require.NoError(t, lb.Unlock(ctx))
	lb, err = f.bRedlock.Lock(ctx, f.redlockKey)
	require.NoError(t, err, "B gets the Redlock once A released it")
	require.NoError(t, lb.Unlock(ctx))
}

// TestClusterFailoverLosesUnreplicatedKey: the master is killed before
// replication carried the key (made certain by cutting the replica's link
// while it is frozen, then locking), and the replica is promoted without
// it. A Redis Cluster alone cannot promise mutual exclusion here: B's
// Single gets the lock while A's is still valid (the overlap this test
// requires), and A learns it only when it extends (ErrNotHeld). A Redlock
// of the cluster and two standalone masters does not overlap: those two
// still hold A's key, so B is refused and A extends and unlocks.
func TestClusterFailoverLosesUnreplicatedKey(t *testing.T) {
	clusterFailoverLosesUnreplicatedKey(t, newFailoverSetup(t, processFaults{faultCluster(t, 1, true)}))
}

func clusterFailoverLosesUnreplicatedKey(t *testing.T, f *failoverSetup) {
	ctx := t.Context()
	master, replica := owner(t, f.ccA, hashslot.Of(f.single), true)
	require.NotEmpty(t, replica)

	cutSlotReplication(t, f.c, master, replica)
	la, err := f.aSingle.Lock(ctx, f.single)
	require.NoError(t, err)
	lr, err := f.aRedlock.Lock(ctx, f.redlockKey)
	require.NoError(t, err)
	f.c.kill(t, master)
	f.c.resume(t, replica)

	waitPromoted(t, f.c, replica, master)
	rep := readOnly(t, replica)
	require.Zero(t, rep.Exists(ctx, f.single, f.redlockKey).Val(), "promoted without A's keys")

	lb, err := untilAnswered(t, "B's Single", func() (*redlock.Lock, error) { return f.bSingle.Lock(ctx, f.single) })
	require.NoError(t, err, "B's Single is granted")
	overlap := time.Now().Before(la.Until())
	require.True(t, overlap, "the overlap: B holds the lock while A's is still valid")

	_, err = f.bRedlock.Lock(ctx, f.redlockKey)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "the Redlock does not overlap: the standalone majority holds A's key")

	// What the holder sees: its Single is gone (B's token is there), its
	// Redlock is not.
	eventually(t, 20*time.Second, "A's Single extend answered", func() bool {
		err := la.Extend(ctx, faultTTL)
		return !errors.Is(err, redlock.ErrUnavailable)
	})
	err = la.Extend(ctx, faultTTL)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "A learns it lost the lock when it extends")
	require.NoError(t, lr.Extend(ctx, faultTTL))
	assert.Equal(t, lb.Token(), rep.Get(ctx, f.single).Val(), "A's failed extend left B's key alone")
	assert.ErrorIs(t, la.Unlock(ctx), redlock.ErrNotHeld)
	assert.Equal(t, lb.Token(), rep.Get(ctx, f.single).Val(), "A's unlock left B's key alone")
	require.NoError(t, lr.Unlock(ctx))
	require.NoError(t, lb.Unlock(ctx))
}

// every is a Retry strategy with a constant delay, short for the tests.
type every struct {
	delay time.Duration
	n     int
}

func (e every) Backoff(i int) (time.Duration, bool) { return e.delay, i < e.n }

// TestClusterSlotMigratedWhileHeld: a held lock's slot is migrated to
// another master by hand (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT
// NODE); its key and fence counter move with it. B is refused before,
// during (go-redis follows ASK) and after (MOVED) the migration; A
// extends and unlocks throughout; a waiter that subscribed on the old
// owner gets the lock when A releases it, woken by the announcement on
// the new owner: its hub follows the slot (hub.go, reopen), which makes
// this the regression test of that.
func TestClusterSlotMigratedWhileHeld(t *testing.T) {
	c := faultCluster(t, 0, false)
	ctx := t.Context()
	key := "mig:{" + fresh("t") + "}"
	s := hashslot.Of(key)
	single := func(st redlock.Strategy) *redlock.Redlock {
		return newSingle(t, adapt(t, redistest.ClusterClient(t, c.Addrs()...)),
			redlock.WithTTL(faultTTL), redlock.WithStrategy(st), redlock.WithFencing())
	}
	a, b := single(redlock.Reject()), single(redlock.Reject())
	// The waiter's delays outlast the test: it can get the lock only when
	// a release announcement (or a hub's resubscription) wakes it.
	waiter := single(every{delay: 10 * time.Minute, n: 1000})

	la, err := a.Lock(ctx, key)
	require.NoError(t, err)
	src, _ := owner(t, redistest.ClusterClient(t, c.Addrs()...), s, false)
	var dst string
	for _, addr := range c.Addrs() {
		if addr != src {
			dst = addr
			break
		}
	}
	srcC, dstC := redistest.Client(t, src), redistest.Client(t, dst)
	srcID, err := srcC.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	dstID, err := dstC.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)

	// The waiter subscribes on the old owner.
	type result struct {
		l   *redlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, key)
		got <- result{l, err}
	}()
	channel := releaseChannel(key)
	eventually(t, 10*time.Second, "the waiter subscribed on the old owner", func() bool {
		n, err := srcC.Do(ctx, "PUBSUB", "SHARDNUMSUB", channel).Slice()
		return err == nil && len(n) == 2 && n[1] == int64(1)
	})
	refused := func(when string) {
		t.Helper()
		_, err := b.Lock(ctx, key)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "B %s", when)
		require.NoError(t, la.Extend(ctx, faultTTL), "A extends %s", when)
	}
	refused("before the migration")

	slotArg := int64(s)
	require.NoError(t, dstC.Do(ctx, "CLUSTER", "SETSLOT", slotArg, "IMPORTING", srcID).Err())
	require.NoError(t, srcC.Do(ctx, "CLUSTER", "SETSLOT", slotArg, "MIGRATING", dstID).Err())
	refused("with the slot migrating, the keys still on the old owner")

	keys, err := srcC.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slotArg, 10).StringSlice()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{key, key + fenceSuffix}, keys, "the lock key and its fence counter")
	host, port, _ := strings.Cut(dst, ":")
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	require.NoError(t, srcC.Do(ctx, args...).Err())
	refused("with the keys moved and the slot not yet reassigned (ASK)")

	for _, addr := range c.Addrs() {
		require.NoError(t, redistest.Client(t, addr).Do(ctx, "CLUSTER", "SETSLOT", slotArg, "NODE", dstID).Err())
	}
	refused("after the migration (MOVED)")
	// Redis drops the sharded subscriptions of a slot it no longer owns
	// (a server-side sunsubscribe); the waiter's hub follows the slot to
	// its new owner, where A's release is announced.
	eventually(t, 10*time.Second, "the waiter's subscription moved to the new owner", func() bool {
		n, err := dstC.Do(ctx, "PUBSUB", "SHARDNUMSUB", channel).Slice()
		m, err2 := srcC.Do(ctx, "PUBSUB", "SHARDNUMSUB", channel).Slice()
		return err == nil && err2 == nil && len(n) == 2 && n[1] == int64(1) && len(m) == 2 && m[1] == int64(0)
	})
	assert.Equal(t, la.Token(), dstC.Get(ctx, key).Val(), "the lock key on the new owner")
	assert.Equal(t, strconv.FormatInt(la.Fence(), 10), dstC.Get(ctx, key+fenceSuffix).Val(), "its fence counter with it")

	select {
	case r := <-got:
		t.Fatalf("the waiter returned while A holds the lock: %v", r.err)
	default:
	}
	require.NoError(t, la.Unlock(ctx))
	var r result
	select {
	case r = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not get the lock after A released it")
	}
	require.NoError(t, r.err, "the waiter gets the lock")
	assert.Greater(t, r.l.Fence(), la.Fence())
	_, err = b.Lock(ctx, key)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "B, while the waiter holds it")
	require.NoError(t, r.l.Unlock(ctx))
}
