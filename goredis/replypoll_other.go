//go:build !linux || 386

package goredis

const canPoll = false

// peek is never called where replies are not polled for (reset leaves
// the poller off).
func (p *poller) peek(uintptr) bool { return true }
