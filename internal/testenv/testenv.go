// Package testenv decides what a test does when something it needs from the
// host is missing (a redis-server binary, a PostgreSQL installation, a
// Docker engine, an image, a tool): it skips, unless an environment
// variable says the run requires that dependency, in which case it fails.
// CI sets the variables so that a broken environment cannot pass as a run
// of skipped tests.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// The environment variables that, set to "1", turn a skip into a failure.
const (
	// Redis covers tests that run real redis-server processes
	// (internal/redisserver).
	Redis = "REDLOCK_REQUIRE_REDIS"
	// Docker covers tests that run Redis containers and the host tools
	// they use (internal/dockercluster).
	Docker = "REDLOCK_REQUIRE_DOCKER"
	// Postgres covers tests that run throwaway PostgreSQL clusters
	// (initdb and postgres; the checkout example's servers_test.go).
	Postgres = "REDLOCK_REQUIRE_POSTGRES"
)

// Required reports whether the environment variable env is "1", i.e.
// tests must fail rather than skip when that dependency is missing.
func Required(env string) bool { return os.Getenv(env) == "1" }

// SkipOrFail stops the test because a dependency is missing: it fails it
// with t.Fatalf when env is "1" and skips it with t.Skipf otherwise. The
// message, built from format and args, says what is missing and how to get
// it; SkipOrFail appends which variable decides. Like Skip and Fatal, it
// must be called from the goroutine running the test.
func SkipOrFail(t testing.TB, env, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required(env) {
		t.Fatalf("%s (%s=1, so this is fatal)", msg, env)
	}
	t.Skipf("%s (set %s=1 to fail instead of skipping)", msg, env)
}
