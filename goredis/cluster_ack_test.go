package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WithReplicaAck on a Redis Cluster node: the write and its WAIT go to the
// master of the key's slot on one connection. The scenarios that kill or
// freeze a server start a cluster of their own (faultCluster); the others
// use the shared one.

// clusterAck is the acknowledgement the tests ask of a cluster node: the
// slot's one replica, within a WAIT timeout that a healthy local replica
// meets and that fits inside ackNodeTimeout.
var clusterAck = WithReplicaAck(1, 500*time.Millisecond)

// ackNodeTimeout is the lockers' per-node timeout in these tests: room for
// a WAIT that times out, and for a call to a dead master.
const ackNodeTimeout = 2 * time.Second

// ackSingle is a Single over a cluster node of cc, rejecting at once,
// with faultTTL (so a first holder's lock outlasts a failover),
// acknowledged by a replica when opts say so. A test that freezes a
// server loads cc's slot map first (owner does): loading it may ask the
// frozen server, and wait for it until the call's deadline.
func ackSingle(t *testing.T, cc *redis.ClusterClient, opts ...Option) *redlock.Single {
	t.Helper()
	g, err := New(cc, opts...)
	require.NoError(t, err)
	l, err := redlock.NewSingle(g, redlock.WithTTL(faultTTL), redlock.WithStrategy(redlock.Reject()),
		redlock.WithNodeTimeout(ackNodeTimeout))
	require.NoError(t, err)
	return l
}

// ackFailed reports whether err is a QuorumError whose one node failed for
// want of replica acknowledgement: the node answered, its replicas did not.
func ackFailed(err error) bool {
	var qe *redlock.QuorumError
	return errors.As(err, &qe) && len(qe.Failed) == 1 && errors.Is(qe.Failed[0].Err, ErrReplicaAck)
}

// TestClusterReplicaAckHealthy: with the slot's replica healthy every
// granting write of a cluster node succeeds, and the replica has it the
// moment the call returns (read at once, no polling: that is what WAIT
// waited for). Keys of several slots, so that the writes reach every
// master.
func TestClusterReplicaAckHealthy(t *testing.T) {
	b, cc := clusterBackend(t, clusterAck)
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	for i := range 3 {
		key := "ack:{" + fresh("h") + "}"
		_, replica := owner(t, cc, slot(key), true)
		rep := readOnly(t, replica)

		ok, err := b.Acquire(ctx, key, "t1", time.Minute)
		require.NoError(t, err, "key %d", i)
		require.True(t, ok)
		assert.Equal(t, "t1", rep.Get(ctx, key).Val(), "acquired: on the replica")
		ok, err = b.Extend(ctx, key, "t1", 3*time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Greater(t, rep.PTTL(ctx, key).Val(), 2*time.Minute, "extended: on the replica")
		ok, err = b.Release(ctx, key, "t1", false)
		require.NoError(t, err)
		require.True(t, ok)

		ok, fence, err := b.AcquireFenced(ctx, key, "t2", time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, "t2", rep.Get(ctx, key).Val(), "acquired fenced: on the replica")
		ok, err = b.RaiseFence(ctx, key, "t2", fence+5)
		require.NoError(t, err)
		require.True(t, ok)
		assert.EqualValues(t, fence+5, must(rep.Get(ctx, key+fenceSuffix).Int64()), "fence raised: on the replica")
		ok, err = b.Release(ctx, key, "t2", true)
		require.NoError(t, err)
		require.True(t, ok)
	}
}

// must returns v, for reads whose error the assertion on v shows anyway.
func must[T any](v T, _ error) T { return v }

// TestClusterReplicaAckFrozenReplica: the replica of the key's slot is
// frozen and cut off from its master. An acknowledged acquisition is
// refused as a failed vote (ErrReplicaAck) and rolled back: the key is
// absent on the master afterwards. Once the replica is back, the same
// locker gets the lock.
func TestClusterReplicaAckFrozenReplica(t *testing.T) {
	c := faultCluster(t, 1, false)
	ctx := t.Context()
	key := "frozen:{" + fresh("t") + "}"
	cc := redistest.ClusterClient(t, c.Addrs()...)
	a := ackSingle(t, cc, clusterAck)
	master, replica := owner(t, cc, slot(key), true)

	cutSlotReplication(t, processFaults{c}, master, replica)
	_, err := a.Lock(ctx, key)
	require.ErrorIs(t, err, redlock.ErrUnavailable)
	assertAckFailed(t, err)
	assert.Zero(t, redistest.Client(t, master).Exists(ctx, key).Val(), "rolled back on the master")

	require.NoError(t, c.ServerAt(replica).Resume())
	var l *redlock.Lock
	eventually(t, 20*time.Second, "the lock granted once the replica is back", func() bool {
		l, err = a.Lock(ctx, key)
		if err != nil {
			require.True(t, ackFailed(err), "only the acknowledgement may fail: %v", err)
		}
		return err == nil
	})
	assert.Equal(t, l.Token(), readOnly(t, replica).Get(ctx, key).Val())
	require.NoError(t, l.Unlock(ctx))
}

// TestClusterReplicaAckMovedIsNotResent: after a manual failover (CLUSTER
// FAILOVER: the replica takes the slot over, the old master becomes its
// replica) a node whose slot map is out of date sends its acknowledged
// write to the old master, which answers MOVED. The write did not run
// there, and is not resent to the new master: the vote fails, the slot
// map is reloaded, and the next call goes to the new master, whose
// replica (the old master) acknowledges it.
func TestClusterReplicaAckMovedIsNotResent(t *testing.T) {
	c := faultCluster(t, 1, false)
	ctx := t.Context()
	key := "moved:{" + fresh("t") + "}"
	cc := redistest.ClusterClient(t, c.Addrs()...)
	g, err := New(cc, clusterAck)
	require.NoError(t, err)
	l, err := redlock.NewSingle(g, redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(ackNodeTimeout))
	require.NoError(t, err)
	master, replica := owner(t, cc, slot(key), true) // loads cc's slot map

	require.NoError(t, redistest.Client(t, replica).Do(ctx, "CLUSTER", "FAILOVER").Err())
	waitRole(t, master, "slave")
	waitRole(t, replica, "master")

	_, err = l.Lock(ctx, key)
	require.ErrorIs(t, err, redlock.ErrUnavailable)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.Len(t, qe.Failed, 1)
	assert.ErrorContains(t, qe.Failed[0].Err, "MOVED", "the old master redirects")
	assert.Zero(t, redistest.Client(t, replica).Exists(ctx, key).Val(), "not resent to the new master")

	var held *redlock.Lock
	eventually(t, 10*time.Second, "the next call goes to the new master", func() bool {
		held, err = l.Lock(ctx, key)
		return err == nil
	})
	assert.Equal(t, held.Token(), readOnly(t, master).Get(ctx, key).Val(), "acknowledged by the old master, now a replica")
	require.NoError(t, held.Unlock(ctx))
}

// waitRole waits until the server at addr reports role ("master" or
// "slave", as ROLE says).
func waitRole(t *testing.T, addr, role string) {
	t.Helper()
	r := readOnly(t, addr)
	eventually(t, 20*time.Second, addr+" is a "+role, func() bool {
		got, err := r.Do(t.Context(), "ROLE").Slice()
		return err == nil && len(got) > 0 && got[0] == role
	})
}

// TestClusterFailoverWithReplicaAckUnreplicated is
// TestClusterFailoverLosesUnreplicatedKey with WithReplicaAck: the same
// cut replication, but A's acquisition is refused (its vote failed) and
// rolled back, so when the master dies and its replica is promoted
// without the key, nobody believes they hold the lock: B's grant overlaps
// nothing. Until the promoted master has a replica again, acknowledged
// acquisitions of its slots fail (there is no replica to acknowledge).
func TestClusterFailoverWithReplicaAckUnreplicated(t *testing.T) {
	c := faultCluster(t, 1, true)
	ctx := t.Context()
	key := "unrep:{" + fresh("t") + "}"
	cc := redistest.ClusterClient(t, c.Addrs()...)
	a := ackSingle(t, cc, clusterAck)
	master, replica := owner(t, cc, slot(key), true)

	cutSlotReplication(t, processFaults{c}, master, replica)
	la, err := a.Lock(ctx, key)
	require.ErrorIs(t, err, redlock.ErrUnavailable, "A is refused: the replica did not acknowledge")
	require.Nil(t, la)
	assertAckFailed(t, err)
	require.Zero(t, redistest.Client(t, master).Exists(ctx, key).Val(), "rolled back on the master")
	require.NoError(t, c.ServerAt(master).Kill())
	require.NoError(t, c.ServerAt(replica).Resume())

	waitPromoted(t, processFaults{c}, replica, master)
	require.Zero(t, readOnly(t, replica).Exists(ctx, key).Val(), "promoted without the key")

	bAck := ackSingle(t, redistest.ClusterClient(t, c.Addrs()...), clusterAck)
	eventually(t, 20*time.Second, "B's acknowledged Lock reaches the promoted master", func() bool {
		_, err = bAck.Lock(ctx, key)
		require.Error(t, err, "no replica is left to acknowledge")
		return ackFailed(err)
	})
	b := ackSingle(t, redistest.ClusterClient(t, c.Addrs()...))
	lb, err := untilAnswered(t, "B's Single", func() (*redlock.Lock, error) { return b.Lock(ctx, key) })
	require.NoError(t, err, "B's Single without acknowledgement is granted: A holds nothing")
	require.NoError(t, lb.Unlock(ctx))
}

// TestClusterFailoverWithReplicaAckKeepsTheLock: A's acknowledged lock is
// on the replica when Lock returns; the master is killed and the replica
// promoted, and B (acknowledged or not) is refused while A's lock is
// valid. A's acknowledged extensions fail while the promoted master has
// no replica; once the old master is back, as its replica, A extends and
// unlocks, and B gets the lock.
func TestClusterFailoverWithReplicaAckKeepsTheLock(t *testing.T) {
	c := faultCluster(t, 1, false)
	ctx := t.Context()
	key := "kept:{" + fresh("t") + "}"
	cc := redistest.ClusterClient(t, c.Addrs()...)
	a := ackSingle(t, cc, clusterAck)
	master, replica := owner(t, cc, slot(key), true)

	la, err := a.Lock(ctx, key)
	require.NoError(t, err)
	rep := readOnly(t, replica)
	require.Equal(t, la.Token(), rep.Get(ctx, key).Val(), "on the replica when Lock returns")
	require.NoError(t, c.ServerAt(master).Kill())
	waitPromoted(t, processFaults{c}, replica, master)

	bAck, b := ackSingle(t, redistest.ClusterClient(t, c.Addrs()...), clusterAck), ackSingle(t, redistest.ClusterClient(t, c.Addrs()...))
	_, err = untilAnswered(t, "B's acknowledged Single", func() (*redlock.Lock, error) { return bAck.Lock(ctx, key) })
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "B finds A's key on the promoted replica")
	_, err = untilAnswered(t, "B's Single", func() (*redlock.Lock, error) { return b.Lock(ctx, key) })
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.True(t, time.Now().Before(la.Until()), "while A's lock is valid")

	eventually(t, 20*time.Second, "A's extension reaches the promoted master", func() bool {
		err := la.Extend(ctx, faultTTL)
		require.ErrorIs(t, err, redlock.ErrUnavailable, "no replica is left to acknowledge")
		return ackFailed(err)
	})
	require.NoError(t, c.ServerAt(master).Restart()) // rejoins as the promoted master's replica
	eventually(t, 30*time.Second, "A extends once the promoted master has a replica", func() bool {
		return la.Extend(ctx, faultTTL) == nil
	})
	assert.Equal(t, la.Token(), readOnly(t, master).Get(ctx, key).Val(), "on the new replica")
	require.NoError(t, la.Unlock(ctx))
	// The rejoined replica may still be catching up (or a loaded machine
	// may keep its acknowledgement past the WAIT timeout): such an
	// attempt is refused as unacknowledged and rolled back; B's lock comes
	// once one is acknowledged, never ErrNotAcquired now that A let go.
	eventually(t, 20*time.Second, "B gets the lock once A released it", func() bool {
		lb, err := bAck.Lock(ctx, key)
		if ackFailed(err) {
			return false
		}
		require.NoError(t, err)
		require.NoError(t, lb.Unlock(ctx))
		return true
	})
}
