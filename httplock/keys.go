package httplock

import (
	"fmt"
	"strings"

	"github.com/quorumlock/redlock"
)

// DefaultKeyNamespace is the prefix of per-record lock keys when
// KeySpace.Namespace is empty, as in the framework's documented format
// rf:lock:{project}:{endpoint}:{recordId}:write.
const DefaultKeyNamespace = "rf:lock"

// KeySpace builds per-record lock keys. Locking per record (not per table
// or endpoint) is what lets writes to different records run in parallel
// while writes to one record take turns. The zero KeySpace uses
// DefaultKeyNamespace; set Namespace to keep two applications that share
// Redis masters apart (see WithKeySpace).
//
// The Middleware builds its keys with a KeySpace; use one directly to
// lock a record outside a request (a batch job, say) under the same key
// the Middleware takes.
type KeySpace struct {
	// Namespace is the key prefix: one or more non-empty segments
	// separated by ':' (such as "rf:lock"). Empty means
	// DefaultKeyNamespace.
	Namespace string
}

// Write returns the key that guards writes (update and delete) to one
// record:
//
//	{namespace}:{project}:{endpoint}:{recordID}:write
//
// for example rf:lock:mini-inventory:supplier:550e8400-e29b-41d4-a716-446655440000:write.
//
// Each part must be non-empty and must not contain ':'. The rule keeps the
// mapping one-to-one: with ':' allowed, project "a:b" with endpoint "c"
// and project "a" with endpoint "b:c" would share a lock and block each
// other for no reason, and a record id taken from a URL could reach into
// another endpoint's keys. Any other byte, including '/', '{' and spaces,
// is kept as is. A violation returns an error matching redlock.ErrInvalid.
func (k KeySpace) Write(project, endpoint, recordID string) (string, error) {
	ns := k.Namespace
	if ns == "" {
		ns = DefaultKeyNamespace
	}
	for seg := range strings.SplitSeq(ns, ":") {
		if seg == "" {
			return "", invalidf("key namespace %q has an empty segment", ns)
		}
	}
	for _, p := range [...]struct{ name, value string }{
		{"project", project}, {"endpoint", endpoint}, {"record id", recordID},
	} {
		if p.value == "" {
			return "", invalidf("empty %s in lock key", p.name)
		}
		if strings.Contains(p.value, ":") {
			return "", invalidf("%s %q contains ':', the lock key separator", p.name, p.value)
		}
	}
	return ns + ":" + project + ":" + endpoint + ":" + recordID + ":write", nil
}

// invalidf returns an error that matches redlock.ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: httplock: "+format, append([]any{redlock.ErrInvalid}, args...)...)
}
