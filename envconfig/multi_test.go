package envconfig

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Code written with LockMany runs unchanged on a disabled locker: sets are
// granted (overlapping ones too: no exclusion), extended, released and
// fenced, one increasing token per key.
func TestConfigDisabledLockMany(t *testing.T) {
	l, closer, err := Config{Strategy: StrategyReject, TTL: time.Second}.Open(redlock.WithFencing())
	require.NoError(t, err)
	defer closer.Close()
	ml := l
	a, err := ml.LockMany(t.Context(), []string{"x", "y"})
	require.NoError(t, err)
	b, err := ml.LockMany(t.Context(), []string{"y", "z"})
	require.NoError(t, err, "disabled: no exclusion")
	assert.Greater(t, b.Fences()[0], a.Fences()[1], "tokens increase")
	require.NoError(t, a.Extend(t.Context(), time.Second))
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, b.Unlock(t.Context()))
}
