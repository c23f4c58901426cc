package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/faultproxy"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
)

// TestElectionNemesis: campaigners standing for three processes win,
// lead briefly and resign, over three masters behind fault proxies that
// deliver late, lose replies or stall on a random minority at a time (the
// network nemesis of nemesis_test.go). Checked: no two leaderships
// overlap (internal/exclusion), a leader that won after another's
// leadership ended has a greater term, and an observer reading the
// masters directly reports terms in strictly increasing order, but for
// a resigned campaign's key that a late acquisition put back on a quorum
// (checkOrderLate).
func TestElectionNemesis(t *testing.T) {
	seed := nemesisSeed(t)
	duration := nemesisDuration(t, 4*time.Second)
	t.Logf("election nemesis seed %d (replay: %s=%d), duration %v", seed, nemesisSeedEnv, seed, duration)
	c := redistest.Start(t, 3)
	nodes := nemesisProxies(t, c.Addrs())
	direct := make([]driver.Node, len(nodes.direct))
	for i, cl := range nodes.direct {
		direct[i] = node(t, cl)
	}
	ev := observe(t, newElection(t, direct, "{leader}", redlock.WithTTL(time.Second)))

	chk := exclusion.New()
	var terms fenceRecords
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var won atomic.Int64
	for id := range 3 {
		lk := nodes.locker(t, fmt.Sprintf("P%d", id), -1)
		e, err := redlock.NewElection(lk, "{leader}", redlock.WithTTL(time.Second), redlock.WithNodeTimeout(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, uint64(id)+1))
		wg.Go(func() { campaignUnderFaults(e, id, rng, stop, chk, &terms, &won) })
	}
	runFaults(nodes, rand.New(rand.NewPCG(seed, 0)), duration)
	close(stop)
	wg.Wait()

	st := chk.Verify(t, "election nemesis")
	pairs := terms.verify(t, chk.Sections())
	checkOrderLate(t, ev.all())
	t.Logf("%d leaderships, %d checked against an earlier one's term; observer events: %d", won.Load(), pairs, len(ev.all()))
	assert.GreaterOrEqual(t, st.Acquisitions, int(duration/time.Second), "too few leaderships: the run tested little")
}

// campaignUnderFaults campaigns until stop, leading up to 20 ms each time.
func campaignUnderFaults(e *redlock.Election, id int, rng *rand.Rand, stop <-chan struct{}, chk *exclusion.Checker,
	terms *fenceRecords, won *atomic.Int64) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		holder := fmt.Sprintf("P%d#%d", id, n)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l, err := e.Campaign(ctx, holder)
		cancel()
		if err != nil {
			o := exclusion.Other // only the context may end a campaign
			if errors.Is(err, context.DeadlineExceeded) {
				o = exclusion.Deadline
			}
			chk.Fail(o, err)
			continue
		}
		won.Add(1)
		entry := chk.Enter(e.Name(), holder, l.Until())
		terms.addFence(holder, e.Name(), l.Term())
		select {
		case <-l.Lost():
		case <-time.After(time.Duration(rng.IntN(20)) * time.Millisecond):
		}
		entry.Exit()
		_ = l.Resign(context.Background()) // may fail under faults: the lease then expires
	}
}

// runFaults changes the faults every 50-300 ms for duration: a random
// minority of the nodes gets a random fault each, the others pass.
func runFaults(nodes *nemesisNodes, rng *rand.Rand, duration time.Duration) {
	n := len(nodes.proxies)
	minority := n - redlock.Quorum(n)
	for start := time.Now(); time.Since(start) < duration; {
		faults := make([]faultproxy.Fault, n)
		for _, i := range rng.Perm(n)[:rng.IntN(minority+1)] {
			switch rng.IntN(3) {
			case 0:
				faults[i] = faultproxy.Fault{Kind: faultproxy.Late, Delay: time.Duration(25+rng.IntN(500)) * time.Millisecond}
			case 1:
				faults[i] = faultproxy.Fault{Kind: faultproxy.LoseReply}
			case 2:
				faults[i] = faultproxy.Fault{Kind: faultproxy.Stall}
			}
		}
		for i, f := range faults {
			nodes.proxies[i].Set(f)
		}
		time.Sleep(time.Duration(50+rng.IntN(251)) * time.Millisecond)
	}
	nodes.setAll(faultproxy.Fault{})
}
