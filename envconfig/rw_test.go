package envconfig

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Code written with RLock and WLock runs unchanged on a disabled locker:
// readers and writers are granted (together too: no exclusion), extended,
// released and fenced, a reader seeing the latest writer's token.
func TestConfigDisabledReadWrite(t *testing.T) {
	l, closer, err := Config{Strategy: StrategyReject, TTL: time.Second}.Open(redlock.WithFencing())
	require.NoError(t, err)
	defer closer.Close()
	rw := l
	w, err := rw.WLock(t.Context(), "x")
	require.NoError(t, err)
	r, err := rw.RLock(t.Context(), "x")
	require.NoError(t, err, "disabled: no exclusion")
	assert.Equal(t, w.Fence(), r.Fence(), "a reader gets the latest writer's token")
	require.NoError(t, r.Extend(t.Context(), time.Second))
	require.NoError(t, r.Unlock(t.Context()))
	require.NoError(t, w.Unlock(t.Context()))
	w2, err := rw.WLock(t.Context(), "x")
	require.NoError(t, err)
	assert.Greater(t, w2.Fence(), w.Fence(), "writer tokens increase")
	require.NoError(t, w2.Unlock(t.Context()))
}
