package goredis

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/hashslot"
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
func ackSingle(t *testing.T, cc *redis.ClusterClient, opts ...Option) *redlock.Redlock {
	t.Helper()
	return newSingle(t, adapt(t, cc, opts...), redlock.WithTTL(faultTTL), redlock.WithStrategy(redlock.Reject()),
		redlock.WithNodeTimeout(ackNodeTimeout))
}

// ackFailed reports whether err is a QuorumError whose one node failed for
// want of replica acknowledgement: the node answered, its replicas did not.
func ackFailed(err error) bool {
	var qe *redlock.QuorumError
	return errors.As(err, &qe) && len(qe.Failed) == 1 && errors.Is(qe.Failed[0].Err, ErrReplicaAck)
}

// TestClusterReplicaAckHealthy: with the slot's replica healthy every
// script call of a cluster node succeeds, its WAIT runs on the key's
// master and nowhere else, and the replica has the writes the moment the
// call returns (read at once, no polling: that is what WAIT waited for).
// Keys of several slots, so that the writes reach every master.
func TestClusterReplicaAckHealthy(t *testing.T) {
	b, cc := clusterNode(t, clusterAck)
	assert.True(t, b.Info().ReplicaAck)
	s := newSingle(t, b, redlock.WithFencing(), redlock.WithTTL(time.Minute), redlock.WithStrategy(redlock.Reject()),
		redlock.WithNodeTimeout(ackNodeTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	for i := range 3 {
		key := "ack:{" + fresh("h") + "}"
		master, replica := owner(t, cc, hashslot.Of(key), true)
		rep := readOnly(t, replica)
		_, err := b.Eval(ctx, counting, []string{key + ":warm"}) // the master knows the script: one WAIT per call
		require.NoError(t, err)
		waits, all := redistest.Calls(t, redistest.Client(t, master), "wait"), totalCalls(t, cc, "wait")
		got, err := b.Eval(ctx, counting, []string{key + ":n"})
		require.NoError(t, err, "key %d", i)
		assert.Equal(t, int64(1), got)
		assert.Equal(t, waits+1, redistest.Calls(t, redistest.Client(t, master), "wait"), "WAIT on the key's master")
		assert.Equal(t, all+1, totalCalls(t, cc, "wait"), "and nowhere else")
		assert.Equal(t, "1", rep.Get(ctx, key+":n").Val(), "the script's write on the replica")

		l, err := s.Lock(ctx, key)
		require.NoError(t, err, "key %d", i)
		assert.Equal(t, l.Token(), rep.Get(ctx, key).Val(), "acquired: on the replica")
		assert.Equal(t, l.Fence(), must(rep.Get(ctx, key+fenceSuffix).Int64()), "the fence counter: on the replica")
		require.NoError(t, l.Extend(ctx, 3*time.Minute))
		assert.Greater(t, rep.PTTL(ctx, key).Val(), 2*time.Minute, "extended: on the replica")
		require.NoError(t, l.Unlock(ctx))
		assert.Zero(t, rep.Exists(ctx, key).Val(), "released: on the replica")
	}
}

// totalCalls counts command over the cluster's masters (replicas run what
// they replicate too).
func totalCalls(t *testing.T, cc *redis.ClusterClient, command string) int {
	var n atomic.Int64
	require.NoError(t, cc.ForEachMaster(t.Context(), func(_ context.Context, c *redis.Client) error {
		n.Add(int64(redistest.Calls(t, c, command)))
		return nil
	}))
	return int(n.Load())
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
	master, replica := owner(t, cc, hashslot.Of(key), true)

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
	l := newSingle(t, adapt(t, cc, clusterAck), redlock.WithStrategy(redlock.Reject()), redlock.WithNodeTimeout(ackNodeTimeout))
	master, replica := owner(t, cc, hashslot.Of(key), true) // loads cc's slot map

	require.NoError(t, redistest.Client(t, replica).Do(ctx, "CLUSTER", "FAILOVER").Err())
	waitRole(t, master, "slave")
	waitRole(t, replica, "master")

	_, err := l.Lock(ctx, key)
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
	master, replica := owner(t, cc, hashslot.Of(key), true)

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
// promoted, and B is refused while A's lock is valid (acknowledged, its
// vote fails first: the promoted master has no replica to acknowledge
// even a refusal). A's acknowledged extensions fail while the promoted
// master has no replica; once the old master is back, as its replica, A extends and
// unlocks, and B gets the lock.
func TestClusterFailoverWithReplicaAckKeepsTheLock(t *testing.T) {
	c := faultCluster(t, 1, false)
	ctx := t.Context()
	key := "kept:{" + fresh("t") + "}"
	cc := redistest.ClusterClient(t, c.Addrs()...)
	a := ackSingle(t, cc, clusterAck)
	master, replica := owner(t, cc, hashslot.Of(key), true)

	la, err := a.Lock(ctx, key)
	require.NoError(t, err)
	rep := readOnly(t, replica)
	require.Equal(t, la.Token(), rep.Get(ctx, key).Val(), "on the replica when Lock returns")
	require.NoError(t, c.ServerAt(master).Kill())
	waitPromoted(t, processFaults{c}, replica, master)

	bAck, b := ackSingle(t, redistest.ClusterClient(t, c.Addrs()...), clusterAck), ackSingle(t, redistest.ClusterClient(t, c.Addrs()...))
	_, err = untilAnswered(t, "B's Single", func() (*redlock.Lock, error) { return b.Lock(ctx, key) })
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "B finds A's key on the promoted replica")
	// Every acknowledged call fails while the promoted master has no
	// replica, a refusal too: B is not granted the lock either way.
	eventually(t, 20*time.Second, "B's acknowledged Lock reaches the promoted master", func() bool {
		_, err = bAck.Lock(ctx, key)
		require.Error(t, err, "B is never granted A's lock")
		return ackFailed(err)
	})
	require.True(t, time.Now().Before(la.Until()), "while A's lock is valid")
	assert.Equal(t, la.Token(), rep.Get(ctx, key).Val(), "A's key untouched by B's attempts")

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
