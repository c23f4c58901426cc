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

// Payloads returns a callback for a Notifier's released that hands every
// payload to the returned channel (dropping them if the test does not
// keep up), and the channel.
func Payloads() (func(string), chan string) {
	ch := make(chan string, 64)
	return func(p string) {
		select {
		case ch <- p:
		default:
		}
	}, ch
}

// Next returns the next value from ch (a payload, a result), failing t
// when Watchdog runs out first.
func Next[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Watchdog):
		t.Fatal("watchdog: nothing received")
		var zero T
		return zero
	}
}
