// Package redact hides the secrets a Redis URL can carry (the user info,
// and query parameters that name credentials) before the URL, or any text
// quoting it, is printed: in errors, log lines and command output.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces the user info of a URL, and the value of a credential
// query parameter.
const Mask = "xxxxx"

// Schemes are the URL schemes that start a new URL after a ',' in a list
// (see URLs), in lower case; a scheme is matched in any case.
var Schemes = []string{
	"redis", "rediss", "unix",
	"redis+cluster", "rediss+cluster",
	"redis+sentinel", "rediss+sentinel",
}

// URLs returns s, one URL, a comma-separated list of them or any text
// quoting them (an error message), with the secrets of each URL replaced
// by Mask:
//
//	redis://alice:secret@10.0.0.1:6379/0   redis://xxxxx@10.0.0.1:6379/0
//	redis://10.0.0.1:6379?password=secret  redis://10.0.0.1:6379?password=xxxxx
//
// The user name goes too, since a URL written as redis://secret@host
// carries a password in that place.
//
// It works on the text, not on a parsed URL, so that it also hides what a
// malformed URL holds: a password may contain any character, '@', '/',
// '?', '#', ',', "://" and blanks included. s is cut into URLs at each ','
// followed (after blanks) by one of Schemes and "://"; a ',' followed by
// anything else continues the URL before it. In each URL, everything from
// the "://" after its scheme (one of Schemes) to its last '@' is user
// info, or from the URL's start when no such "://" comes before its first
// '@'. A query parameter whose name (%XX-unescaped, in any case) contains
// pass, pwd, user, secret, token, auth or cred hides everything after its
// '=' to the end of the URL (or, in text, to the '"' that ends a URL
// quoted as %q quotes it), since an unescaped '&', '#' or '@' can be part
// of its value.
//
// So it may hide more than the secrets (a host between two '@', the
// parameters after a credential), never less, with two exceptions that
// only a password holding a Redis scheme and "://" makes: in a list, a ','
// followed by a scheme and "://" is cut there, as Load-style list parsing
// cuts it; and in text around a URL without a scheme (user:password@host)
// such a password shows up to its "://". Value has no second exception:
// use it for configuration values.
func URLs(s string) string { return mask(s, false) }

// Value is URLs for a configuration value: one URL or a comma-separated
// list of them, nothing around them. A URL that does not start with one of
// Schemes (after blanks) is masked from its start to its last '@', so a
// password in the host:port form (user:password@host:port) never shows,
// whatever it holds.
func Value(s string) string { return mask(s, true) }

func mask(s string, value bool) string {
	if !strings.ContainsAny(s, "@=") {
		return s
	}
	pieces := strings.Split(s, ",")
	var b strings.Builder
	b.Grow(len(s))
	start := 0 // the first piece of the URL being gathered
	for i := 1; i <= len(pieces); i++ {
		if i < len(pieces) && !startsURL(pieces[i]) {
			continue
		}
		if start > 0 {
			b.WriteByte(',')
		}
		b.WriteString(one(strings.Join(pieces[start:i], ","), value))
		start = i
	}
	return b.String()
}

// startsURL reports whether piece, after leading blanks, starts with one
// of Schemes and "://".
func startsURL(piece string) bool {
	piece = strings.TrimLeft(piece, blanks)
	scheme, _, ok := strings.Cut(piece, "://")
	return ok && isScheme(scheme)
}

const blanks = " \t\r\n"

// isScheme reports whether s is one of Schemes, in any case.
func isScheme(s string) bool {
	for _, sc := range Schemes {
		if strings.EqualFold(s, sc) {
			return true
		}
	}
	return false
}

// one masks the user info and credential parameters of u, one URL or
// text around one (a value when value is set).
func one(u string, value bool) string {
	last := strings.LastIndexByte(u, '@')
	scheme, after := schemeAt(u, value)
	// In text, a URL that follows a '"' is quoted (%q): an unescaped '"'
	// ends it, and its credential parameter's value.
	quoted := !value && scheme > 0 && u[scheme-1] == '"'
	p, end := credentialValue(u, quoted)
	if p < 0 {
		p, end = len(u), len(u)
	}
	if last < 0 {
		return maskRange(u, p, end)
	}
	from := 0 // the user info starts after the scheme, or at the start
	if after >= 0 && after <= strings.IndexByte(u, '@') {
		from = after
	}
	switch {
	case p < from:
		return maskRange(u, p, max(end, last))
	case p <= last:
		return maskRange(u, from, max(end, last))
	default:
		return u[:from] + Mask + maskRange(u[last:], p-last, end-last)
	}
}

// maskRange replaces u[from:to] with Mask, when it is not empty.
func maskRange(u string, from, to int) string {
	if from >= to {
		return u
	}
	return u[:from] + Mask + u[to:]
}

// schemeAt finds the first of Schemes followed by "://" in u: where the
// scheme starts and where the "://" ends, or -1, -1. In a value the
// scheme must start u (after blanks); in text it is the first one not
// preceded by a character of a scheme.
func schemeAt(u string, value bool) (start, after int) {
	if value {
		trimmed := strings.TrimLeft(u, blanks)
		if scheme, _, ok := strings.Cut(trimmed, "://"); ok && isScheme(scheme) {
			start = len(u) - len(trimmed)
			return start, start + len(scheme) + len("://")
		}
		return -1, -1
	}
	for i := 0; i < len(u); {
		k := strings.Index(u[i:], "://")
		if k < 0 {
			break
		}
		k += i
		j := k
		for j > 0 && isSchemeByte(u[j-1]) {
			j--
		}
		if isScheme(u[j:k]) {
			return j, k + len("://")
		}
		i = k + 1
	}
	return -1, -1
}

// isSchemeByte reports whether c can be part of a URL scheme.
func isSchemeByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// credentialValue is where the value of u's first credential parameter
// (see Credential) starts, after its '=', and ends; p is -1 when there is
// none. A value ends with u, or in a quoted URL at the first unescaped
// '"'. A value that is Mask already does not count, so masking twice
// changes nothing.
func credentialValue(u string, quoted bool) (p, end int) {
	for i := 0; i < len(u); i++ {
		if u[i] != '=' {
			continue
		}
		j := i
		for j > 0 && isNameByte(u[j-1]) {
			j--
		}
		if !Credential(u[j:i]) {
			continue
		}
		p, end = i+1, len(u)
		if quoted {
			for k := p; k < len(u); k++ {
				if u[k] == '"' && u[k-1] != '\\' {
					end = k
					break
				}
			}
		}
		if u[p:end] != Mask {
			return p, end
		}
	}
	return -1, -1
}

// isNameByte reports whether c can be part of a query parameter's name
// as this package reads one: letters, digits, '_', '-', '.', '+' and the
// '%' of an escape.
func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == '+' || c == '%'
}

// credentialWords are the pieces of a parameter name that make it a
// credential.
var credentialWords = []string{"pass", "pwd", "user", "secret", "token", "auth", "cred"}

// Credential reports whether the query parameter name (%XX-escaped or
// not, in any case) names a credential: password, username, user, pass,
// sentinel_password and the like. URLs hides the values of these.
func Credential(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	for _, w := range credentialWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}
