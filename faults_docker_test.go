package redlock

// The fault suite on five Redis containers (internal/dockercluster), each
// on its own network, reached only through its port published on
// 127.0.0.1. It runs the scenarios of faults_test.go with docker kill,
// docker pause and docker start, plus the faults only containers allow:
// cutting a master off its network, and latency (through the node's
// in-process forwarder, since the kernel here has no sch_netem).
//
// Without a Docker engine or the image (scripts/redis-image.sh) every test
// skips; REDLOCK_REQUIRE_DOCKER=1 (set by .ci/run when an engine answers)
// turns the skip into a failure.

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/dockercluster"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultContainers starts five containers. Clients use the published ports;
// after every start or reconnect the port is re-read and must be the one
// the clients already use.
func faultContainers(t *testing.T) (*faultCluster, *dockercluster.Cluster) {
	c := dockercluster.Start(t, 5)
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.DockerAddr()
	}
	samePort := func(t *testing.T, i int) {
		t.Helper()
		require.Equal(t, addrs[i], c.Nodes[i].DockerAddr(), "node %d's published port moved; clients would be stale", i)
	}
	return &faultCluster{
		addrs: addrs,
		// A round trip goes through docker-proxy; a paused container costs
		// this much per call.
		nodeTimeout: 300 * time.Millisecond,
		// Killing and restarting three containers takes seconds; the
		// immediate-restart case must fit inside one TTL.
		restartTTL: 8 * time.Second,
		kill:       func(t *testing.T, i int) { c.Nodes[i].Kill(t) },
		start:      func(t *testing.T, i int) { c.Nodes[i].Start(t); samePort(t, i) },
		pause:      func(t *testing.T, i int) { c.Nodes[i].Pause(t) },
		resume:     func(t *testing.T, i int) { c.Nodes[i].Unpause(t) },
	}, c
}

// faultNetworkCut holds a lock while one master is cut off, keeps it alive
// with Extend on the other four (so the cut master's copy goes stale and
// expires), reconnects the master and keeps holding. A second client tries
// all along: the stale master must never let it in while the first holder
// is valid. cut/heal select the flavour: docker network disconnect (the
// port mapping goes away, calls fail fast) or an iptables DROP (packets
// vanish, calls hang until the node timeout).
func faultNetworkCut(t *testing.T, fc *faultCluster, cut, heal func(testing.TB)) {
	const key = "cut"
	const ttl = 2 * time.Second
	bs := fc.backends(t)
	lk := fc.locker(t, bs, WithTTL(ttl), WithStrategy(Reject()))
	chk := exclusion.New()

	a, err := lk.Lock(t.Context(), key)
	require.NoError(t, err)
	aStart := time.Now()
	aIn := chk.Enter(key, "A", a.Until())
	cut(t)

	// B tries every few milliseconds until told to stop.
	stop := make(chan struct{})
	bGot := make(chan *Lock, 1)
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := lk.Lock(t.Context(), key)
			if err != nil {
				chk.Fail(faultClassify(err), err)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			chk.Enter(key, "B", b.Until()).Exit()
			_ = b.Unlock(t.Context())
			select {
			case bGot <- b:
			default:
			}
		}
	}()
	stopB := sync.OnceFunc(func() { close(stop); <-bDone })
	defer stopB()

	// A keeps its lock alive on the four reachable masters until the cut
	// master's copy (set with the first TTL) has surely expired.
	hold := func(until time.Time) {
		for time.Now().Before(until) {
			time.Sleep(ttl / 4)
			require.NoError(t, a.Extend(t.Context(), ttl), "four of five masters extend")
			aIn.Extend(a.Until())
		}
	}
	hold(aStart.Add(ttl + ttl/2))
	heal(t)
	v, err := client(t, fc.addrs[0]).Get(t.Context(), key).Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
	}
	assert.NotEqual(t, a.Token(), v, "the cut master's copy of A's key expired: it is stale")
	hold(time.Now().Add(ttl))
	select {
	case <-bGot:
		t.Fatal("B got the lock while A held it")
	default:
	}
	aIn.Exit()
	require.NoError(t, a.Unlock(t.Context()))
	select {
	case <-bGot:
	case <-time.After(faultWatchdog):
		t.Fatal("watchdog: B never got the lock after A released it")
	}
	stopB()

	st := chk.Verify(t, "network cut during a hold")
	assert.Positive(t, st.Conflicts, "B was refused while A held the lock")
	assert.Zero(t, st.Unavailable, "four masters always answered")
}

// faultLatency slows masters down through their forwarders. A slow master
// shrinks the validity by the time the round waited for it; a majority
// slower than the validity (or than the TTL) refuses the lock and the keys
// are rolled back on every master.
func faultLatency(t *testing.T, fc *faultCluster, c *dockercluster.Cluster) {
	const key = "latency"
	// Every client goes through the forwarder, with or without latency, so
	// the baseline and the slow case take the same path.
	bs := make([]Backend, len(c.Nodes))
	for i, n := range c.Nodes {
		bs[i] = NewBackend(client(t, n.Addr()))
	}
	direct := make([]*redis.Client, len(c.Nodes)) // published ports, no latency
	for i := range c.Nodes {
		direct[i] = client(t, fc.addrs[i])
	}
	keysLeft := func() int {
		n := 0
		for _, d := range direct {
			if d.Exists(t.Context(), key).Val() > 0 {
				n++
			}
		}
		return n
	}

	// Validity left when Lock returns, and how long the call took.
	const ttl, slow = 2 * time.Second, 300 * time.Millisecond
	lk := fc.locker(t, bs, WithTTL(ttl), WithNodeTimeout(time.Second), WithStrategy(Reject()))
	drift := driftFor(ttl, DefaultDriftFactor)
	measure := func() (left, took time.Duration) {
		t.Helper()
		start := time.Now()
		l, err := lk.Lock(t.Context(), key)
		end := time.Now()
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		// The round started inside [start, end], and Until counts from it.
		assert.False(t, l.Until().Before(start.Add(ttl-drift)), "Until is TTL - drift after the round's start")
		assert.False(t, l.Until().After(end.Add(ttl-drift)), "Until is TTL - drift after the round's start")
		return l.Until().Sub(end), end.Sub(start)
	}
	base, _ := measure()
	c.Nodes[0].AddLatency(t, slow)
	left, took := measure()
	t.Logf("validity left: %v without latency, %v with %v on one master (call took %v)", base, left, slow, took)
	assert.GreaterOrEqual(t, took, slow, "the round waited for the slow master")
	assert.LessOrEqual(t, left, ttl-drift-slow, "validity shrank by at least the latency")
	assert.Less(t, left, base, "less validity than without latency")

	chk := exclusion.New()
	w := faultContend(t, fc.locker(t, bs, WithTTL(ttl), WithNodeTimeout(time.Second)), chk, key, 3)
	w.waitAcquisitions(t, 6, "acquisitions with a slow master")
	w.Stop()
	st := chk.Verify(t, "latency on one master")
	assert.Zero(t, st.Unavailable)

	// A majority answers yes, but later than the validity: TTL 1 s, drift
	// factor 0.5 leaves 498 ms, the slow masters answer after 700 ms, well
	// inside the 950 ms node timeout.
	c.Nodes[0].ClearLatency(t)
	for _, n := range c.Nodes[:3] {
		n.AddLatency(t, 700*time.Millisecond)
	}
	_, err := lk.Lock(t.Context(), key, WithTTL(time.Second), WithDriftFactor(0.5), WithNodeTimeout(950*time.Millisecond))
	require.ErrorIs(t, err, ErrNotAcquired, "a quorum that came too late grants nothing")
	var qe *QuorumError
	require.ErrorAs(t, err, &qe)
	assert.GreaterOrEqual(t, qe.Granted, qe.Quorum, "the masters did agree")
	assert.LessOrEqual(t, qe.Validity, time.Duration(0), "but no validity was left")
	assert.Zero(t, keysLeft(), "rolled back on every master")

	// Slower than the TTL itself: the node timeout (below the TTL) cuts the
	// slow majority off, the call fails as unavailable and the SETs that
	// did land are rolled back.
	for _, n := range c.Nodes[:3] {
		n.AddLatency(t, 1500*time.Millisecond)
	}
	_, err = lk.Lock(t.Context(), key, WithTTL(time.Second), WithNodeTimeout(950*time.Millisecond))
	require.ErrorIs(t, err, ErrUnavailable, "a majority did not answer within the node timeout")
	assert.Zero(t, keysLeft(), "rolled back on every master, the slow ones included")

	for _, n := range c.Nodes[:3] {
		n.ClearLatency(t)
	}
	l, err := lk.Lock(t.Context(), key)
	require.NoError(t, err, "service resumes without the latency")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestDockerFaults runs every fault scenario on five Redis containers,
// each on a fresh cluster.
func TestDockerFaults(t *testing.T) {
	scenarios := []struct {
		name string
		run  func(*testing.T, *faultCluster, *dockercluster.Cluster)
	}{
		{"KillOneThenTwo", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultKillOneThenTwo(t, fc) }},
		{"KillThree", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultKillThree(t, fc) }},
		{"PauseMidAcquisition", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultPauseMidAcquisition(t, fc) }},
		{"RestartDelayed", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultRestartDelayed(t, fc) }},
		{"RestartImmediate", func(t *testing.T, fc *faultCluster, _ *dockercluster.Cluster) { faultRestartImmediate(t, fc) }},
		{"NetworkDisconnect", func(t *testing.T, fc *faultCluster, c *dockercluster.Cluster) {
			faultNetworkCut(t, fc, c.Nodes[0].Disconnect, c.Nodes[0].Reconnect)
		}},
		{"NetworkPartition", func(t *testing.T, fc *faultCluster, c *dockercluster.Cluster) {
			faultNetworkCut(t, fc, c.Nodes[0].Partition, c.Nodes[0].Heal)
		}},
		{"Latency", faultLatency},
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			fc, c := faultContainers(t)
			s.run(t, fc, c)
		})
	}
}

// TestExternalCluster checks mutual exclusion on masters started outside
// the test, such as the compose cluster:
//
//	scripts/redis-image.sh && docker-compose -f docker-compose.cluster.yml up -d
//	REDLOCK_CLUSTER_ADDRS=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005 \
//		go test -race -run TestExternalCluster -v .
//
// Stop masters meanwhile (docker-compose kill redis1 redis2) to watch the
// quorum at work. It skips when REDLOCK_CLUSTER_ADDRS is not set.
func TestExternalCluster(t *testing.T) {
	env := os.Getenv("REDLOCK_CLUSTER_ADDRS")
	if env == "" {
		t.Skip("set REDLOCK_CLUSTER_ADDRS=host:port,... to run against running masters")
	}
	addrs := strings.Split(env, ",")
	fc := &faultCluster{addrs: addrs, nodeTimeout: 300 * time.Millisecond}
	lk := fc.locker(t, fc.backends(t), WithTTL(2*time.Second))
	chk := exclusion.New()
	key := "external-" + time.Now().Format("150405.000000")
	c := faultContend(t, lk, chk, key, 4)
	c.waitAcquisitions(t, 200, "acquisitions on the external cluster")
	c.Stop()
	st := chk.Verify(t, "external cluster "+env)
	assert.Positive(t, st.Acquisitions)
}
