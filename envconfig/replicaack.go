package envconfig

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/redact"
)

// The query parameters of a node URL that ask for replica
// acknowledgement (goredis.WithReplicaAck): every write that grants or
// keeps a lock on the node waits until ParamReplicaAck replicas have it,
// for at most ParamReplicaAckTimeout, or counts as a failed vote.
//
//	redis://10.0.0.1:6379?replica_ack=1&replica_ack_timeout=500ms
//	redis+sentinel://10.0.0.1?master_name=mymaster&replica_ack=1&replica_ack_timeout=500ms
//
// Both are required together: replica_ack a whole number of replicas, at
// least 1; replica_ack_timeout a Go duration with its unit (500ms, 1s),
// at least 1ms, to be kept well inside the lockers' per-node timeout
// (redlock.WithNodeTimeout). They are this package's, not go-redis's:
// they are taken out of the URL before go-redis parses the rest. A URL
// without them asks for no acknowledgement: a failover can then lose a
// lock (see goredis.WithReplicaAck and the README).
const (
	ParamReplicaAck        = "replica_ack"
	ParamReplicaAckTimeout = "replica_ack_timeout"
)

// replicaAck is what a node URL's replica_ack parameters ask for; n == 0
// when they are absent.
type replicaAck struct {
	n       int
	timeout time.Duration
}

// splitReplicaAck takes the replica_ack parameters out of the node URL u:
// rest is u without them (every other byte of u unchanged, so go-redis
// parses and reports the rest as before), ack what they ask for. The
// query is found as url.Parse finds it (after the first '?', before a
// '#'). Errors quote the URL with its user info masked, and a value only
// when the URL has no user info.
func splitReplicaAck(u string) (rest string, ack replicaAck, err error) {
	beforeFragment, fragment, hasFragment := strings.Cut(u, "#")
	base, query, hasQuery := strings.Cut(beforeFragment, "?")
	if !hasQuery {
		return u, replicaAck{}, nil
	}
	var kept []string
	found := map[string][]string{}
	for _, piece := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(piece, "=")
		key, kerr := url.QueryUnescape(k)
		if kerr != nil || (key != ParamReplicaAck && key != ParamReplicaAckTimeout) {
			kept = append(kept, piece) // go-redis's to parse, or to report
			continue
		}
		found[key] = append(found[key], v)
	}
	if len(found) == 0 {
		return u, replicaAck{}, nil
	}
	if ack, err = parseReplicaAck(u, found); err != nil {
		return "", replicaAck{}, err
	}
	rest = base
	if len(kept) > 0 {
		rest += "?" + strings.Join(kept, "&")
	}
	if hasFragment {
		rest += "#" + fragment
	}
	return rest, ack, nil
}

// parseReplicaAck checks the replica_ack parameters found in the URL u,
// raw (still %-escaped) values by name.
func parseReplicaAck(u string, found map[string][]string) (replicaAck, error) {
	masked := redact.Value(u)
	bad := func(format string, args ...any) (replicaAck, error) {
		return replicaAck{}, fmt.Errorf("%q: "+format, append([]any{masked}, args...)...)
	}
	quote := func(raw string) string {
		if masked != u {
			return "(not shown: the URL has user info)"
		}
		return strconv.Quote(raw)
	}
	for _, name := range []string{ParamReplicaAck, ParamReplicaAckTimeout} {
		switch vs := found[name]; {
		case len(vs) == 0:
			other := ParamReplicaAck
			if name == ParamReplicaAck {
				other = ParamReplicaAckTimeout
			}
			return bad("%s without %s: give both (for example %s=1&%s=500ms)", other, name, ParamReplicaAck, ParamReplicaAckTimeout)
		case len(vs) > 1:
			return bad("%s given %d times", name, len(vs))
		}
	}
	nRaw, _ := url.QueryUnescape(found[ParamReplicaAck][0])
	n, err := strconv.ParseUint(nRaw, 10, 31)
	if err != nil || n < 1 {
		return bad("%s %s: want a whole number of replicas, at least 1 (leave both parameters out for none)", ParamReplicaAck, quote(nRaw))
	}
	tRaw, _ := url.QueryUnescape(found[ParamReplicaAckTimeout][0])
	timeout, err := time.ParseDuration(tRaw)
	if err != nil {
		return bad("%s %s: want a duration with its unit, such as 500ms", ParamReplicaAckTimeout, quote(tRaw))
	}
	if timeout < time.Millisecond {
		return bad("%s %s: want at least 1ms (WAIT 0 would wait forever)", ParamReplicaAckTimeout, quote(tRaw))
	}
	return replicaAck{n: int(n), timeout: timeout}, nil
}
