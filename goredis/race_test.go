//go:build race

package goredis

// raceEnabled: the test binary runs under the race detector, which
// allocates on its own and makes sync.Pool drop objects at random.
const raceEnabled = true
