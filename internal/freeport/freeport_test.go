package freeport

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStable: a Stable port lies below the ephemeral range and can be
// listened on.
func TestStable(t *testing.T) {
	for range 20 {
		port, err := Stable()
		require.NoError(t, err)
		require.Less(t, port, ephemeralLow())
		require.GreaterOrEqual(t, port, 1024)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err)
		l.Close()
	}
}
