package redact

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestURLs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"127.0.0.1:7001,127.0.0.1:7002", "127.0.0.1:7001,127.0.0.1:7002"},
		{"redis://:secret@127.0.0.1:6379/0", "redis://xxxxx@127.0.0.1:6379/0"},
		{"redis://alice:secret@127.0.0.1:6379", "redis://xxxxx@127.0.0.1:6379"},
		{"redis://secret@127.0.0.1:6379", "redis://xxxxx@127.0.0.1:6379"},
		{"rediss://u:p@h:1?dial_timeout=3", "rediss://xxxxx@h:1?dial_timeout=3"},
		{"unix://u:secret@/run/redis.sock?db=2", "unix://xxxxx@/run/redis.sock?db=2"},
		{":secret@127.0.0.1:6379", "xxxxx@127.0.0.1:6379"}, // host:port form, no scheme
		{"redis://:s1@h1:1, redis://:s2@h2:2,redis://h3:3", "redis://xxxxx@h1:1, redis://xxxxx@h2:2,redis://h3:3"},
		// Malformed: the password holds characters that end the user info.
		{"redis://:se/cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se#cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se,cret@h:1,redis://h2:2", "redis://xxxxx@h:1,redis://h2:2"},
		{"redis://:se@cret@h:1", "redis://xxxxx@xxxxx@h:1"},
		{"redis://:se://cret@h:1", "redis://xxxxx@h:1"},
		// More than the user info, never less.
		{"redis://h1:1,redis://:s@h2:2", "redis://xxxxx@h2:2"},
	}
	for _, tt := range tests {
		got := URLs(tt.in)
		assert.Equal(t, tt.want, got, tt.in)
		for _, secret := range []string{"secret", "se/cret", "cret", "s1", "s2", "alice"} {
			if strings.Contains(tt.in, secret) {
				assert.NotContains(t, got, secret, tt.in)
			}
		}
	}
}
