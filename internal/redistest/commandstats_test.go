package redistest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_set:calls=7,usec=9\r\n"
	stats, err := parseCommandStats(info)
	require.NoError(t, err)
	assert.Equal(t, map[string]CommandStat{
		"evalsha":        {Calls: 12, Usec: 345},
		"client|setinfo": {Calls: 2, Usec: 3},
		"set":            {Calls: 7, Usec: 9},
	}, stats)

	for _, bad := range []string{"cmdstat_get\r\n", "cmdstat_get:calls=x,usec=1\r\n", "cmdstat_get:calls=1,usec=\r\n"} {
		_, err := parseCommandStats(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// TestCommandStats reads a real server's: a SET run twice is counted twice.
func TestCommandStats(t *testing.T) {
	c := Client(t, Start(t, 1).Addrs()[0])
	before := Calls(t, c, "set")
	for range 2 {
		require.NoError(t, c.Set(t.Context(), "k", "v", 0).Err())
	}
	assert.Equal(t, before+2, Calls(t, c, "set"))
	assert.Positive(t, CommandStats(t, c)["info"].Calls, "the INFO calls themselves")
}
