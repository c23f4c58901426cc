//go:build race

package main

// raceEnabled: the test binary runs under the race detector, and so do
// the service processes the end-to-end tests build.
const raceEnabled = true
