package redlock_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/quorumlock/redlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An attempt's token is a random UUID v4, then the suffix (a campaign's
// value), made in one allocation.
func TestNewToken(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := redlock.NewToken("|leader-1")
		random, value, ok := strings.Cut(tok, "|")
		require.True(t, ok, tok)
		assert.Equal(t, "leader-1", value)
		u, err := uuid.Parse(random)
		require.NoError(t, err, tok)
		assert.Equal(t, uuid.Version(4), u.Version())
		assert.Equal(t, uuid.RFC4122, u.Variant())
		assert.Equal(t, random, u.String(), "canonical form, lower case")
		assert.False(t, seen[random], "a token repeated")
		seen[random] = true
	}
	assert.Len(t, redlock.NewToken(""), 36)
	if redlock.RaceEnabled {
		return // the race detector allocates on its own
	}
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = redlock.NewToken("") }))
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = redlock.NewToken("|leader-1") }))
}
