//go:build !race

package goredis

const raceEnabled = false
