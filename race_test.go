//go:build race

package redlock

// raceEnabled: the test binary runs under the race detector, which
// changes what allocates (escape analysis and the runtime's own
// bookkeeping), so allocation counts are checked only without it.
const raceEnabled = true
