package redlock_test

// Leader election under the fault scenarios' faults: a minority of the
// masters (two of five) killed, paused or partitioned while a leader
// holds, on redis-server processes (TestElectionFaults) and on Redis
// containers (TestDockerElectionFaults).

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestElectionFaults runs the election fault scenario on redis-server
// processes under each of processFaults.
func TestElectionFaults(t *testing.T) { processFaults().run(t, faultElectionUnder) }

// TestDockerElectionFaults runs the election fault scenario on five
// Redis containers under each of dockerFaults.
func TestDockerElectionFaults(t *testing.T) { dockerFaults().run(t, faultElectionUnder) }

// faultElectionTTL is the leases' TTL in the scenario.
const faultElectionTTL = 2 * time.Second

// faultElectionUnder: three campaigners (processes of their own) win,
// lead up to 20 ms and resign, over and over, and an observer watches. A
// fourth campaigner wins and holds through the fault: the minority is
// broken while it leads, its lease renews on the majority for a TTL and
// more, then it resigns, and the minority is repaired. A killed master
// comes back empty, its term counter lost with it. Checked: never two
// leaders (the checker), terms strictly increasing across leaderships,
// Observe's terms in order, and leaderships in every phase.
func faultElectionUnder(t *testing.T, fc *faultCluster, f minorityFault) {
	const name = "{faults-leader}"
	opts := []redlock.Option{redlock.WithTTL(faultElectionTTL)}
	ev := observe(t, faultElection(t, fc, name, opts...))
	chk := exclusion.New()
	var terms fenceRecords
	c := &faultContention{chk: chk, stop: make(chan struct{})}
	for id := range 3 {
		e := faultElection(t, fc, name, opts...)
		rng := rand.New(rand.NewPCG(uint64(id), 0))
		c.wg.Go(func() { campaignUnderFaults(e, id, rng, c.stop, chk, &terms, &c.acq) })
	}
	t.Cleanup(c.Stop)
	c.waitAcquisitions(t, 10, "leaderships with every master up")

	steady := faultElection(t, fc, name, opts...)
	ctx, cancel := context.WithTimeout(t.Context(), faultWatchdog)
	defer cancel()
	l, err := steady.Campaign(ctx, "steady")
	require.NoError(t, err, "the steady campaigner wins")
	in := chk.Enter(name, "steady", l.Until())
	terms.addFence("steady", name, l.Term())
	for _, i := range faultMinority {
		f.inject(t, i)
	}
	broken := time.Now() // the last master broken: the TTL counts from here
	// Lead on for more than a TTL, the lease renewing on the majority.
	select {
	case <-l.Lost():
		// One failed renewal ends a lease (renew.go). A campaign won
		// before the previous leader's release reached every master may
		// hold on three or four; with two of them broken, fewer than a
		// quorum extend (the cause names a healthy master "not held").
		t.Logf("the steady leader lost its lease under the fault: %v", context.Cause(l.Context()))
	case <-time.After(faultElectionTTL + faultElectionTTL/2):
	}
	in.Extend(l.Until())
	in.Exit()
	_ = l.Resign(t.Context()) // may not reach a quorum under the fault: the lease then expires
	c.waitAcquisitions(t, 10, "leaderships with a minority "+f.what)
	time.Sleep(time.Until(broken.Add(faultElectionTTL))) // a killed master stays out a TTL (the rule)
	for _, i := range faultMinority {
		f.fix(t, i)
	}
	c.waitAcquisitions(t, 10, "leaderships after the repair")
	c.Stop()
	faultElectionVerify(t, chk, &terms, ev, f.what)
}

// faultElectionVerify judges the scenario: one leader at a time, terms
// rising across leaderships, the observer's reports in order.
func faultElectionVerify(t *testing.T, chk *exclusion.Checker, terms *fenceRecords, ev *leaderEvents, what string) {
	t.Helper()
	st := chk.Verify(t, "election, minority "+what)
	pairs := terms.verify(t, chk.Sections())
	events := ev.all()
	checkOrder(t, events)
	t.Logf("%d leaderships, %d checked against an earlier one's term; observer: %d events, %d leaders",
		st.Acquisitions, pairs, len(events), len(leaders(events)))
	assert.GreaterOrEqual(t, st.Acquisitions, 31)
	assert.Positive(t, pairs, "leaderships followed one another")
	assert.Positive(t, len(leaders(events)), "the observer saw leaders")
}

// faultElection is an election on a locker of its own (one process) over
// the cluster's masters, with the cluster's node timeout.
func faultElection(t *testing.T, fc *faultCluster, name string, opts ...redlock.Option) *redlock.Election {
	t.Helper()
	e, err := redlock.NewElection(fc.locker(t, fc.backends(t)), name, opts...)
	require.NoError(t, err)
	return e
}
