package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a subcommand leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
