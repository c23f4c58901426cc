package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a subcommand leaves a goroutine behind.
// It silences go-redis as main does (TestCleanOutput checks main).
func TestMain(m *testing.M) {
	quietRedis()
	goleak.VerifyTestMain(m)
}
