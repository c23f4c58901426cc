package envconfig

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redact"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// marker is the password the tests of this file hide in node URLs: no
// rendering of an error, a Config or a Node may show it.
const marker = "QZJXmarker"

// urlForms are the shapes a node URL around a password pw takes, one per
// place a password can sit and per kind of URL: the user info (with and
// without a user, malformed ones included, since pw may hold any
// character), the credential query parameters, each scheme, inside a list,
// with this package's replica_ack parameters, and without a scheme.
var urlForms = []func(scheme, pw string) string{
	func(s, pw string) string { return s + "://:" + pw + "@127.0.0.1:6379" },
	func(s, pw string) string { return s + "://alice:" + pw + "@127.0.0.1:6379/0" },
	func(s, pw string) string { return s + "://" + pw + "@127.0.0.1:6379" },
	func(s, pw string) string { return s + "://127.0.0.1:6379?password=" + pw },
	func(s, pw string) string { return s + "://127.0.0.1:6379/1?db=0&username=" + pw + "&dial_timeout=1s" },
	func(s, pw string) string { return s + "://127.0.0.1:6379?master_name=m&pass=" + pw },
	func(s, pw string) string {
		return "redis://127.0.0.1:1," + s + "://:" + pw + "@127.0.0.1:2,redis://127.0.0.1:3"
	},
	func(s, pw string) string { return s + "://:" + pw + "@127.0.0.1:2," + s + "://:p@127.0.0.1:3/x" },
	func(s, pw string) string { return s + "://:" + pw + "@127.0.0.1?master_name=m&addr=127.0.0.1:26380" },
	func(s, pw string) string { return s + "://u:" + pw + "@127.0.0.1:7000?addr=127.0.0.1:7001" },
	func(s, pw string) string {
		return s + "://:" + pw + "@127.0.0.1:1?replica_ack=1&replica_ack_timeout=soon"
	},
	func(s, pw string) string { return s + "://:" + pw + "@127.0.0.1:99999" },
	func(s, pw string) string { return s + "://:" + pw + "@" },
	func(_, pw string) string { return ":" + pw + "@127.0.0.1:6379" },
	func(_, pw string) string { return "alice:" + pw + "@127.0.0.1:6379" },
}

// schemes are the schemes the forms are tried with: every one this
// package takes, and a few it refuses.
var schemes = append(append([]string(nil), redact.Schemes...), "REDIS", "http", "redis+x", "")

// listCut reports whether pw holds a ',' followed by a scheme and "://",
// which the list syntax of LOCK_DISTRIBUTED_NODES reads as the start of
// the next URL (see redact.URLs): such a password must be %XX-escaped.
func listCut(pw string) bool {
	for i := strings.IndexByte(pw, ','); i >= 0; {
		rest := strings.TrimLeft(pw[i+1:], " \t\r\n")
		if s, _, ok := strings.Cut(rest, "://"); ok {
			for _, sc := range redact.Schemes {
				if strings.EqualFold(s, sc) {
					return true
				}
			}
		}
		j := strings.IndexByte(pw[i+1:], ',')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// checkNodesHideMarker runs nodes through everything that reads or shows
// LOCK_DISTRIBUTED_NODES (Load, Config's printing, ParseNode and Node's
// printing, Config.Open), as a list and as one URL, and fails when any of
// it shows marker.
func checkNodesHideMarker(t *testing.T, nodes string) {
	t.Helper()
	for _, enabled := range []string{"true", "false"} {
		c, err := Load(vars(map[string]string{VarEnabled: enabled, VarNodes: nodes}))
		if err != nil {
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assertNoSecret(t, err, marker)
			var ee *Error
			require.ErrorAs(t, err, &ee)
			assertNoSecret(t, ee.Value, marker)
			continue
		}
		assertNoSecret(t, c, marker)
		assertNoSecret(t, &c, marker)
		for _, u := range c.Nodes { // as redlock inspect reads them
			n, err := ParseNode(u)
			require.NoError(t, err)
			assertNoSecret(t, n, marker)
		}
		checkOpenHidesMarker(t, c)
	}
	n, err := ParseNode(nodes)
	if err != nil {
		assertNoSecret(t, err, marker)
	} else {
		assertNoSecret(t, n, marker)
		assertNoSecret(t, &n, marker)
	}
	checkOpenHidesMarker(t, Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{nodes}})
}

// checkOpenHidesMarker opens c, which contacts no node, and fails when its
// error shows marker.
func checkOpenHidesMarker(t *testing.T, c Config) {
	t.Helper()
	_, closer, err := c.Open()
	if err != nil {
		assertNoSecret(t, err, marker)
		return
	}
	require.NoError(t, closer.Close())
}

// TestNodeURLsHideSecrets: a fixed table of nasty node URLs (every form a
// password can take, with the characters that break URL parsing, in
// every scheme): the password shows in no error, Config or Node, through
// any fmt verb or slog.
func TestNodeURLsHideSecrets(t *testing.T) {
	pws := []string{
		marker,
		url.PathEscape(marker + "/?#@"),
		"x@" + marker + "://z", // '@' and "://" in the password
		marker + "@h:1/0",
		"a/" + marker,
		marker + "#x",
		marker + "?db=1",
		"pa55," + marker,
		marker + ",x@h",
		"a b " + marker,
		marker + "%zz",
		"&password=" + marker,
		marker + "\"x",
		"x@" + marker + "@y",
		marker + ",http://x",
	}
	for _, form := range urlForms {
		for _, s := range schemes {
			for _, pw := range pws {
				nodes := form(s, pw)
				t.Run(nodes, func(t *testing.T) { checkNodesHideMarker(t, nodes) })
			}
		}
	}
}

// FuzzNodeURLSecrets builds node URLs around a password holding marker,
// in every form of urlForms and scheme of schemes, with fuzzed text on
// both sides of the marker: no error, Config or Node shows it. The
// seeds run in every go test; go test -fuzz=FuzzNodeURLSecrets searches
// further.
func FuzzNodeURLSecrets(f *testing.F) {
	seeds := []string{"", "@", "/", "?", "#", ",", "://", ":", " ", "%", "%zz", "&", "=", "\"", "@h:1/", ",x@",
		"redis:/", "http://", "&password=", "?db=x", "@127.0.0.1:1,redis://h"}
	for i := range urlForms {
		for j, pre := range seeds {
			f.Add(uint8(i), uint8(j), pre, seeds[(i+j)%len(seeds)])
		}
	}
	f.Fuzz(func(t *testing.T, form, scheme uint8, pre, post string) {
		pw := pre + marker + post
		if listCut(pw) || strings.Contains(pre+post, marker) {
			t.Skip("a password holding ',' and a scheme is two URLs of the list")
		}
		nodes := urlForms[int(form)%len(urlForms)](schemes[int(scheme)%len(schemes)], pw)
		checkNodesHideMarker(t, nodes)
	})
}

// The three URL forms that once showed their password: an '@' and a
// "://" inside it, and a password or user name as a query parameter. Each
// is refused, with an error that says where credentials go.
func TestNodeURLCredentialForms(t *testing.T) {
	tests := []struct{ nodes, shows string }{
		{"redis://:x@" + marker + "://z@127.0.0.1:6379", `"redis://xxxxx@127.0.0.1:6379": malformed user info`},
		{"redis+sentinel://h?master_name=m&password=" + marker, `"redis+sentinel://h?master_name=m&password=xxxxx": query parameter "password": not supported: put the user name and password in the URL's user info`},
		{"redis+sentinel://h?master_name=m&username=" + marker, `query parameter "username": not supported`},
		{"redis://h:6379?password=" + marker, `"redis://h:6379?password=xxxxx": query parameter "password": not supported`},
		{"redis+cluster://h?password=" + marker, `"redis+cluster://h?password=xxxxx": query parameter "password": not supported`},
		{"redis://h:6379?sentinel_password=" + marker + "&db=1", `query parameter "sentinel_password": not supported`},
	}
	for _, tt := range tests {
		t.Run(tt.nodes, func(t *testing.T) {
			_, err := Load(vars(map[string]string{VarEnabled: "true", VarNodes: tt.nodes}))
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assert.Contains(t, err.Error(), tt.shows)
			assertNoSecret(t, err, marker)
			_, _, err = Config{Enabled: true, Strategy: StrategyReject, TTL: time.Second, Nodes: []string{tt.nodes}}.Open()
			require.ErrorIs(t, err, redlock.ErrInvalid)
			assertNoSecret(t, err, marker)
		})
	}
}

// An error a client library gives Node.Invalid is masked too: such an
// error may quote the URL.
func TestNodeInvalidMasksLibraryErrors(t *testing.T) {
	n, err := parseNode("redis://:" + marker + "@127.0.0.1:6379")
	require.NoError(t, err)
	libErr := fmt.Errorf("dial redis://:%s@127.0.0.1:6379: refused", marker)
	err = n.Invalid(libErr)
	assert.ErrorIs(t, err, libErr)
	assert.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Contains(t, err.Error(), "dial redis://xxxxx@127.0.0.1:6379: refused")
	assertNoSecret(t, err, marker)
}
