package redlock_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// campaignToken is a token as a campaign for value stores it: a UUID,
// "|", the value.
func campaignToken(value string) string { return "00000000-0000-4000-8000-000000000000|" + value }

// hold sets the election key on a node by hand, with its fence counter.
func hold(t *testing.T, m *miniredis.Miniredis, key, token string, fence int64) {
	t.Helper()
	require.NoError(t, m.Set(key, token))
	m.SetTTL(key, time.Minute)
	require.NoError(t, m.Set(key+":fence", strconv.FormatInt(fence, 10)))
}

// Leader reports a token only when a quorum holds it with a quorum of
// its holders agreeing on the counter, the term.
func TestLeaderReadsTheQuorum(t *testing.T) {
	ms, bs := minis(t, 5)
	e := newElection(t, bs, "{sched}")
	a := campaignToken("a")
	for i, f := range []int64{10, 6, 6, 6} {
		hold(t, ms[i], "{sched}", a, f)
	}
	hold(t, ms[4], "{sched}", campaignToken("b"), 50)
	l, err := e.Leader(t.Context())
	require.NoError(t, err)
	assert.Equal(t, redlock.Leader{Value: "a", Term: 6}, l,
		"three holders agree on 6; the 10 is a node whose reply the winner lost")

	hold(t, ms[3], "{sched}", a, 7)
	_, err = e.Leader(t.Context())
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "holders at 10, 6, 6, 7: the fencing round is under way")

	ms[2].Del("{sched}")
	ms[3].Del("{sched}")
	_, err = e.Leader(t.Context())
	assert.ErrorIs(t, err, redlock.ErrNoLeader, "a minority holding a is no leader")
	assert.NotErrorIs(t, err, redlock.ErrUnavailable)
}

func TestLeaderOfAForeignLockIsNoLeader(t *testing.T) {
	ms, bs := minis(t, 3)
	e := newElection(t, bs, "{sched}")
	for _, m := range ms {
		hold(t, m, "{sched}", "plain-lock-token", 3)
	}
	_, err := e.Leader(t.Context())
	assert.ErrorIs(t, err, redlock.ErrNoLeader)
}

// Too few answers to decide is ErrUnavailable, not "no leader".
func TestLeaderUnavailable(t *testing.T) {
	ms, bs := minis(t, 3)
	e := newElection(t, bs, "{sched}", redlock.WithNodeTimeout(200*time.Millisecond))
	hold(t, ms[0], "{sched}", campaignToken("a"), 1)
	ms[1].Close()
	ms[2].Close()
	_, err := e.Leader(t.Context())
	assert.ErrorIs(t, err, redlock.ErrUnavailable)
	assert.NotErrorIs(t, err, redlock.ErrNoLeader)
}

// Counters left high on a minority (attempts that were rolled back) do
// not make a term go backwards: the winner's fencing round raises its
// quorum to the maximum, and Leader reads that term.
func TestElectionTermsOverUnevenCounters(t *testing.T) {
	ms, bs := minis(t, 3)
	e := newElection(t, bs, "{sched}")
	var last int64
	for i, bump := range []int64{100, 0, 500, 0} {
		if bump > 0 {
			require.NoError(t, ms[i%3].Set("{sched}:fence", strconv.FormatInt(bump, 10)))
		}
		l, err := e.Campaign(t.Context(), "v"+strconv.Itoa(i))
		require.NoError(t, err)
		assert.Greater(t, l.Term(), max(last, bump), "campaign %d", i)
		got, err := e.Leader(t.Context())
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Value: l.Value(), Term: l.Term()}, got, "Leader reads the winner's own term")
		last = l.Term()
		require.NoError(t, l.Resign(t.Context()))
	}
}
