package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/exclusion"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Several campaigners, each on a locker of its own (a process), win and
// resign in turn: the checker sees no two leaderships overlap, every
// term is greater than the one before, and an observer's events are in
// order.
func TestElectionOneLeaderAtATime(t *testing.T) {
	for _, kind := range electionKinds {
		for _, n := range []int{1, 3, 5} {
			t.Run(fmt.Sprintf("%s/N=%d", kind, n), func(t *testing.T) {
				bs := electionNodes(t, kind, n).bs
				ev := observe(t, newElection(t, bs, "{sched}"))
				chk := exclusion.New()
				terms := &termLog{}
				var wg sync.WaitGroup
				for c := range 4 {
					// The default node timeout of a 10 s TTL (1 s) keeps a
					// loaded machine from failing a release: miniredis never
					// expires a key that a failed release left behind.
					e := newElection(t, bs, "{sched}", redlock.WithTTL(10*time.Second))
					wg.Go(func() { campaignRounds(t, e, c, 3, chk, terms) })
				}
				wg.Wait()
				st := chk.Verify(t, "campaigns")
				assert.Equal(t, 12, st.Acquisitions, "every campaign won")
				checkOrder(t, ev.all())
			})
		}
	}
}

// termLog checks that terms handed to leaders strictly increase in the
// order the leaders won.
type termLog struct {
	mu   sync.Mutex
	last int64
}

func (l *termLog) won(t *testing.T, term int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if term <= l.last {
		t.Errorf("a leader got term %d after a leader with term %d", term, l.last)
	}
	l.last = term
}

// campaignRounds wins e rounds times, holding the leadership briefly each
// time, recorded in chk, then resigns.
func campaignRounds(t *testing.T, e *redlock.Election, c, rounds int, chk *exclusion.Checker, terms *termLog) {
	for r := range rounds {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		l, err := e.Campaign(ctx, fmt.Sprintf("c%d-r%d", c, r))
		cancel()
		if err != nil {
			chk.Fail(exclusion.Other, err)
			continue
		}
		entry := chk.Enter(e.Name(), l.Value(), l.Until())
		terms.won(t, l.Term())
		time.Sleep(time.Millisecond)
		entry.Exit()
		if err := l.Resign(context.Background()); err != nil {
			t.Errorf("Resign: %v", err)
		}
	}
}

// Resign hands the leadership to a campaign that waits, through the
// release announcement: the waiter's retry interval (TTL/10, 6 s here) is
// longer than its deadline, so only the hand-off can make it win.
func TestElectionResignHandsOver(t *testing.T) {
	for _, kind := range electionKinds {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/N=%d", kind, n), func(t *testing.T) {
				bs := electionNodes(t, kind, n).bs
				ev := observe(t, newElection(t, bs, "{sched}"))
				ev.waitFor(t, redlock.Leader{})
				a := newElection(t, bs, "{sched}", redlock.WithTTL(time.Minute))
				la, err := a.Campaign(t.Context(), "a")
				require.NoError(t, err)
				ev.waitFor(t, redlock.Leader{Value: "a", Term: la.Term()})

				lkB := lockerFor(t, bs)
				b, err := redlock.NewElection(lkB, "{sched}", redlock.WithTTL(time.Minute))
				require.NoError(t, err)
				won := campaignAsync(t, b, "b", 5*time.Second)
				testwait.Until(t, "b waiting in line", func() bool { return redlock.InLine(lkB, "{sched}") == 1 })

				require.NoError(t, la.Resign(t.Context()))
				require.Error(t, la.Context().Err(), "Resign cancels the leadership's context")
				r := <-won
				require.NoError(t, r.err, "the waiting campaign wins on the hand-off")
				assert.Greater(t, r.l.Term(), la.Term())
				ev.waitFor(t, redlock.Leader{Value: "b", Term: r.l.Term()})
				assert.Equal(t, []redlock.Leader{{Value: "a", Term: la.Term()}, {Value: "b", Term: r.l.Term()}}, leaders(ev.all()))
				checkOrder(t, ev.all())
				require.NoError(t, r.l.Resign(t.Context()))
			})
		}
	}
}

type campaignResult struct {
	l   *redlock.Leadership
	err error
}

// campaignAsync campaigns in a goroutine, bounded by within; the result
// arrives on the channel (resigned at cleanup if the test did not).
func campaignAsync(t *testing.T, e *redlock.Election, value string, within time.Duration) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		l, err := e.Campaign(ctx, value)
		ch <- campaignResult{l, err}
	})
	t.Cleanup(wg.Wait)
	return ch
}

// A lease that cannot be renewed (its keys vanished from the nodes) ends
// the leadership: Lost closes, Context ends with ErrLockLost, Resign
// reports ErrNotHeld, and nobody leads.
func TestElectionLostLeadership(t *testing.T) {
	ms, bs := minis(t, 3)
	e := newElection(t, bs, "{sched}", redlock.WithTTL(600*time.Millisecond))
	l, err := e.Campaign(t.Context(), "a")
	require.NoError(t, err)
	for _, m := range ms {
		m.Del("{sched}")
	}
	testwait.Until(t, "Lost closing", func() bool {
		select {
		case <-l.Lost():
			return true
		default:
			return false
		}
	})
	require.ErrorIs(t, context.Cause(l.Context()), redlock.ErrLockLost)
	_, err = e.Leader(t.Context())
	require.ErrorIs(t, err, redlock.ErrNoLeader)
	require.ErrorIs(t, l.Resign(t.Context()), redlock.ErrNotHeld)
}

// A campaign that waits stops when its context ends, with ErrNotAcquired
// and the context's error.
func TestElectionCampaignHonoursContext(t *testing.T) {
	_, bs := minis(t, 3)
	e := newElection(t, bs, "{sched}")
	l, err := e.Campaign(t.Context(), "a")
	require.NoError(t, err)
	defer l.Resign(context.Background())
	res := <-campaignAsync(t, newElection(t, bs, "{sched}"), "b", 50*time.Millisecond)
	require.ErrorIs(t, res.err, redlock.ErrNotAcquired)
	require.ErrorIs(t, res.err, context.DeadlineExceeded)
}

func TestElectionBadInput(t *testing.T) {
	_, bs := minis(t, 3)
	lk := lockerFor(t, bs)
	var nilSingle *redlock.Redlock
	for name, build := range map[string]func() (*redlock.Election, error){
		"nil locker":       func() (*redlock.Election, error) { return redlock.NewElection(nil, "x") },
		"typed nil locker": func() (*redlock.Election, error) { return redlock.NewElection(nilSingle, "x") },
		"empty name":       func() (*redlock.Election, error) { return redlock.NewElection(lk, "") },
		"bad option":       func() (*redlock.Election, error) { return redlock.NewElection(lk, "x", redlock.WithTTL(-1)) },
	} {
		e, err := build()
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		assert.Nil(t, e, name)
	}
	e := newElection(t, bs, "x")
	for name, value := range map[string]string{"empty value": "", "oversize value": strings.Repeat("v", redlock.MaxValueLen+1)} {
		l, err := e.Campaign(t.Context(), value)
		assert.ErrorIs(t, err, redlock.ErrInvalid, name)
		assert.Nil(t, l, name)
	}
	var nilCtx context.Context
	_, err := e.Campaign(nilCtx, "v")
	assert.ErrorIs(t, err, redlock.ErrInvalid, "Campaign with a nil context")
	_, err = e.Leader(nilCtx)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "Leader with a nil context")
	_, err = e.Observe(nilCtx)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "Observe with a nil context")
	l, err := e.Campaign(t.Context(), strings.Repeat("v", redlock.MaxValueLen))
	require.NoError(t, err, "a value of MaxValueLen bytes is fine")
	require.NoError(t, l.Resign(t.Context()))
}
