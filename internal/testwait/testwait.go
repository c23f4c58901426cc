// Package testwait is the tests' one way to wait for a condition: poll it,
// and fail the test when a generous watchdog runs out. The watchdog only
// catches a hang; no test measures time with it.
package testwait

import (
	"testing"
	"time"
)

// Watchdog bounds every wait. It is far above any wait a passing test
// makes, so a slow machine never fails a correct test.
const Watchdog = 20 * time.Second

// Until polls cond every millisecond until it holds, failing t with what
// when Watchdog runs out first.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("watchdog: %s did not happen within %v", what, Watchdog)
		}
		time.Sleep(time.Millisecond)
	}
}
