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
		{"redis://h1:1,redis://:s1@h2:2", "redis://h1:1,redis://xxxxx@h2:2"},
		{"REDIS+Cluster://:s1@h1:1,Rediss+sentinel://:s2@h2?master_name=m", "REDIS+Cluster://xxxxx@h1:1,Rediss+sentinel://xxxxx@h2?master_name=m"},
		// Malformed: the password holds characters that end the user info.
		{"redis://:se/cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se#cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se?cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se,cret@h:1,redis://h2:2", "redis://xxxxx@h:1,redis://h2:2"},
		{"redis://:se@cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:se://cret@h:1", "redis://xxxxx@h:1"},
		{"redis://:x@secret://z@127.0.0.1:6379", "redis://xxxxx@127.0.0.1:6379"},
		{"redis://:se@cr,et@h:1", "redis://xxxxx@h:1"},                      // a ',' and no scheme after it: one URL
		{"redis://:se,http://cret@h:1", "redis://xxxxx@h:1"},                // not a Redis scheme
		{"redis://:a@h1,redis://b@h2", "redis://xxxxx@h1,redis://xxxxx@h2"}, // the list syntax's reading
		// Credential parameters, in any case or escaping, to the URL's end.
		{"redis://h:6379?password=secret", "redis://h:6379?password=xxxxx"},
		{"redis://h:6379?db=1&Password=secret&dial_timeout=1s", "redis://h:6379?db=1&Password=xxxxx"},
		{"redis+sentinel://h?master_name=m&username=secret", "redis+sentinel://h?master_name=m&username=xxxxx"},
		{"redis+sentinel://h?sentinel_password=se&cret", "redis+sentinel://h?sentinel_password=xxxxx"},
		{"redis://h?pass%77ord=secret", "redis://h?pass%77ord=xxxxx"},
		{"redis://h?user=secret,redis://h2:2?pwd=secret", "redis://h?user=xxxxx,redis://h2:2?pwd=xxxxx"},
		{"redis://h?password=se,cret", "redis://h?password=xxxxx"},
		{"redis://h?password=se#cret", "redis://h?password=xxxxx"},
		{"redis://:secret@h?auth=secret", "redis://xxxxx@h?auth=xxxxx"},
		{"redis://h?master_name=m&dial_timeout=1s", "redis://h?master_name=m&dial_timeout=1s"},
		// Text quoting a URL, as a client library's error does.
		{`redis: invalid URL "redis://:secret@h:x": bad port`, `redis: invalid URL "redis://xxxxx@h:x": bad port`},
	}
	for _, tt := range tests {
		got := URLs(tt.in)
		assert.Equal(t, tt.want, got, tt.in)
		assert.NotContains(t, got, "secret", tt.in)
		assert.NotContains(t, got, "cret", tt.in)
		assert.Equal(t, got, URLs(got), "masking is idempotent: %s", tt.in)
	}
}

// A password with any of the characters that end user info, anywhere in
// it, in any URL of a list: none of its bytes shows.
func TestURLsAnyPassword(t *testing.T) {
	const marker = "QZJX"
	specials := []string{"@", "/", "?", "#", ",", "://", ":", " ", "%", "&", "=", "@h:1/", ",x@", "redis:/", "http://"}
	for _, a := range specials {
		for _, b := range specials {
			pw := a + marker + b
			for _, u := range []string{
				"redis://:" + pw + "@127.0.0.1:6379",
				"redis://alice:" + pw + "@127.0.0.1:6379/0",
				"redis://" + pw + "@h",
				"redis://h1:1,rediss://:" + pw + "@h2:2,redis://h3:3",
				"redis://:p@h1:1,redis+sentinel://:" + pw + "@h2?master_name=m",
				"redis://h:1?password=" + pw,
				"redis://h:1?db=0&username=" + pw + "&x=1",
			} {
				for _, got := range []string{URLs(u), Value(u)} {
					assert.NotContains(t, got, marker, "%s -> %s", u, got)
				}
			}
			for _, u := range []string{":" + pw + "@h:1", "alice:" + pw + "@h:1", " :" + pw + "@h:1,redis://h2"} {
				got := Value(u)
				assert.NotContains(t, got, marker, "%s -> %s", u, got)
			}
		}
	}
}

// Value masks a URL without a scheme from its start; URLs keeps the text
// before a URL's scheme, as in an error message.
func TestValue(t *testing.T) {
	for _, tt := range []struct{ in, value, text string }{
		{"redis://:secret@h:1", "redis://xxxxx@h:1", "redis://xxxxx@h:1"},
		{" redis://:secret@h:1", " redis://xxxxx@h:1", " redis://xxxxx@h:1"},
		{":secret@h:1", "xxxxx@h:1", "xxxxx@h:1"},
		{":se redis://cret@h:1", "xxxxx@h:1", ":se redis://xxxxx@h:1"},
		{`bad URL "redis://:secret@h:1"`, `xxxxx@h:1"`, `bad URL "redis://xxxxx@h:1"`},
		{"h:1?password=secret", "h:1?password=xxxxx", "h:1?password=xxxxx"},
		{`"redis://h?password=se\"cret": no`, `"redis://h?password=xxxxx`, `"redis://h?password=xxxxx": no`},
	} {
		assert.Equal(t, tt.value, Value(tt.in), tt.in)
		assert.Equal(t, tt.text, URLs(tt.in), tt.in)
	}
}

func TestCredential(t *testing.T) {
	for _, name := range []string{"password", "PASSWORD", "username", "user", "pass", "passwd", "pwd",
		"sentinel_password", "sentinel_username", "auth", "token", "secret", "credentials", "pass%77ord"} {
		assert.True(t, Credential(name), name)
	}
	for _, name := range []string{"db", "addr", "master_name", "dial_timeout", "client_name", "replica_ack", "protocol", ""} {
		assert.False(t, Credential(name), name)
	}
	assert.True(t, strings.HasPrefix(URLs("password=secret"), "password="))
}

// FuzzURLs puts a password holding a marker, with fuzzed text on both
// sides, in the user info or a credential parameter of a URL, alone or in
// a list: neither URLs nor Value shows the marker. Passwords holding a
// ',' followed by a scheme and "://" are the documented exception.
func FuzzURLs(f *testing.F) {
	const marker = "QZJX"
	for _, s := range []string{"", "@", "/", "?", "#", ",", "://", ":", " ", "%", "&", "=", "\"", "@h:1/", ",x@", "redis:/"} {
		f.Add(uint8(len(s)), s, "@")
		f.Add(uint8(len(s)+1), "x", s)
	}
	forms := []func(pw string) string{
		func(pw string) string { return "redis://:" + pw + "@127.0.0.1:6379" },
		func(pw string) string { return "rediss://alice:" + pw + "@127.0.0.1:6379/0?dial_timeout=1s" },
		func(pw string) string {
			return "redis://h1:1,redis+sentinel://" + pw + "@h2?master_name=m,redis://h3:3"
		},
		func(pw string) string { return "redis://h:1?db=0&password=" + pw + "&x=1" },
		func(pw string) string { return `bad URL "redis+cluster://:` + pw + `@h:1": no` },
	}
	f.Fuzz(func(t *testing.T, form uint8, pre, post string) {
		pw := pre + marker + post
		if strings.Contains(pre+post, marker) {
			t.Skip()
		}
		for i := strings.IndexByte(pw, ','); i >= 0 && i < len(pw); i++ {
			if pw[i] == ',' && startsURL(pw[i+1:]) {
				t.Skip("a ',' and a scheme start the next URL of a list")
			}
		}
		u := forms[int(form)%len(forms)](pw)
		for _, got := range []string{URLs(u), Value(u)} {
			if strings.Contains(got, marker) {
				t.Errorf("%q -> %q", u, got)
			}
		}
	})
}
