package rueidisnode

import (
	"context"
	"testing"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockerOverLostReplies is TestEvalNeverResends seen from a locker:
// the key a lost acquisition may have set is rolled back rather than
// left to block everyone for its TTL, a lost release's reply is not a
// lost lock, and Do whose release's reply is lost succeeds. The server
// ran each script once.
func TestLockerOverLostReplies(t *testing.T) {
	srv := redistest.Start(t, 1).Servers[0]
	loser := &replyLoser{}
	n := serverNode(t, srv.Addr(), quiet, loser.option)
	d := direct(t, srv.Addr())
	s := newSingle(t, n, redlock.WithStrategy(redlock.Reject()))
	warmup, err := s.Lock(t.Context(), "locker:warm") // the node knows the scripts
	require.NoError(t, err)
	require.NoError(t, warmup.Unlock(t.Context()))

	t.Run("acquire", func(t *testing.T) {
		calls := redistest.Calls(t, d, "evalsha")
		loser.arm(t, n, 1)
		_, err := s.Lock(t.Context(), "locker:acquire")
		require.Error(t, err, "the reply was lost")
		assert.Equal(t, calls+2, redistest.Calls(t, d, "evalsha"), "the acquisition once, then the rollback")
		assert.Zero(t, d.Exists(t.Context(), "locker:acquire").Val(), "the key we may have set is rolled back")
		lk, err := s.Lock(t.Context(), "locker:acquire")
		require.NoError(t, err, "the key is free again")
		require.NoError(t, lk.Unlock(t.Context()))
	})
	t.Run("release", func(t *testing.T) {
		lk, err := s.Lock(t.Context(), "locker:release")
		require.NoError(t, err)
		calls := redistest.Calls(t, d, "evalsha")
		loser.arm(t, n, 1)
		err = lk.Unlock(t.Context())
		assert.Equal(t, calls+1, redistest.Calls(t, d, "evalsha"), "the release ran once")
		assert.Zero(t, d.Exists(t.Context(), "locker:release").Val(), "the release ran")
		assert.NotErrorIs(t, err, redlock.ErrNotHeld, "a lost reply is not a lost lock")
		assert.ErrorIs(t, err, redlock.ErrUnavailable, "the node's answer is unknown")
	})
	t.Run("Do", func(t *testing.T) {
		err := s.Do(t.Context(), "locker:do", func(context.Context) error {
			loser.arm(t, n, 1) // the release's reply is lost
			return nil
		})
		assert.NoError(t, err, "the release ran; nothing was lost")
		assert.Zero(t, d.Exists(t.Context(), "locker:do").Val())
	})
}
