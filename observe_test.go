package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Observe reports every change, in order: nobody, a, b (a resigned to
// it), nobody (b's process died and its lease expired), c.
func TestObserveSeesEveryChange(t *testing.T) {
	for _, kind := range electionKinds {
		for _, n := range []int{1, 3, 5} {
			t.Run(fmt.Sprintf("%s/N=%d", kind, n), func(t *testing.T) {
				s := electionNodes(t, kind, n)
				const ttl = time.Second
				ev := observe(t, newElection(t, s.bs, "{sched}", redlock.WithTTL(ttl)))
				ev.waitFor(t, redlock.Leader{})
				la := campaign(t, newElection(t, s.bs, "{sched}", redlock.WithTTL(time.Minute)), "a")
				a := redlock.Leader{Value: "a", Term: la.Term()}
				ev.waitFor(t, a)

				killBs, kill := s.killable(t)
				lkB := lockerFor(t, killBs)
				eb, err := redlock.NewElection(lkB, "{sched}", redlock.WithTTL(ttl))
				require.NoError(t, err)
				wonB := campaignAsync(t, eb, "b", testwait.Watchdog)
				testwait.Until(t, "b waiting in line", func() bool { return redlock.InLine(lkB, "{sched}") == 1 })
				require.NoError(t, la.Resign(t.Context()))
				rb := <-wonB
				require.NoError(t, rb.err)
				b := redlock.Leader{Value: "b", Term: rb.l.Term()}
				ev.waitFor(t, b)

				kill()
				ev.waitFor(t, redlock.Leader{})
				testwait.Until(t, "b's Lost closing", func() bool { return closed(rb.l.Lost()) })
				lc := campaign(t, newElection(t, s.bs, "{sched}", redlock.WithTTL(time.Minute)), "c")
				c := redlock.Leader{Value: "c", Term: lc.Term()}
				ev.waitFor(t, c)

				all := ev.all()
				checkOrder(t, all)
				assert.Equal(t, []redlock.Leader{a, b, c}, leaders(all))
				i := slices.Index(all, b)
				require.GreaterOrEqual(t, i, 0, "b with its own term: %v", all)
				assert.Equal(t, redlock.Leader{}, all[i+1], "no leader once b's lease expired: %v", all)
				require.NoError(t, lc.Resign(t.Context()))
			})
		}
	}
}

// campaign wins e for value, which the test knows to be free.
func campaign(t *testing.T, e *redlock.Election, value string) *redlock.Leadership {
	t.Helper()
	l, err := e.Campaign(t.Context(), value)
	require.NoError(t, err)
	return l
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Observe's channel closes when its context ends, also while nobody
// receives (its goroutine does not outlive the context; TestMain's
// goleak check catches one that would).
func TestObserveEndsWithItsContext(t *testing.T) {
	_, bs := minis(t, 3)
	e := newElection(t, bs, "{sched}")
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := e.Observe(ctx)
	require.NoError(t, err)
	require.Equal(t, redlock.Leader{}, <-ch, "the first event is the current state")
	l := campaign(t, e, "a") // a change that nobody receives
	cancel()
	testwait.Until(t, "the channel closing", func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
	require.NoError(t, l.Resign(t.Context()))
}
