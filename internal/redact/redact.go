// Package redact hides the user info (user names and passwords) of Redis
// URLs before they are printed: in errors, log lines and command output.
package redact

import "strings"

// Mask replaces the user info of a URL.
const Mask = "xxxxx"

// URLs returns s, one URL or a comma-separated list of them, with the user
// info of each replaced by Mask: "redis://alice:secret@10.0.0.1:6379/0"
// becomes "redis://xxxxx@10.0.0.1:6379/0". The user name goes too, since
// a URL written as redis://secret@host carries a password in that place.
//
// It works on the text, not on a parsed URL, so that it also hides what a
// malformed URL holds (a password with an unescaped '/', '#', ',' or
// '@'): everything between a "://" and the next '@' after it, or between
// the start (or the previous '@') and an '@' with no "://" before it, is
// user info. It may hide more than the user info (a host without user
// info listed before one with it, a query value containing '@'), never
// less.
func URLs(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	start := 0 // the part of s not yet copied
	for {
		at := strings.IndexByte(s[start:], '@')
		if at < 0 {
			b.WriteString(s[start:])
			return b.String()
		}
		at += start
		from := start
		if i := strings.Index(s[start:at], "://"); i >= 0 {
			from = start + i + len("://")
		}
		b.WriteString(s[start:from])
		b.WriteString(Mask)
		b.WriteByte('@')
		start = at + 1
	}
}
