package envconfig

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redact"
	"github.com/redis/go-redis/v9"
)

// SchemeSentinel starts the URL of a master behind Redis Sentinel in
// LOCK_DISTRIBUTED_NODES:
//
//	redis+sentinel://[user:password@]host1[:port][,host2[:port]...]/mastername[/db]
//
// The hosts are the sentinels (port 26379 when left out), mastername the
// name they monitor the master under, db the database (0 when left out).
// The user info, %XX-escaped as in a redis:// URL, authenticates to the
// master (and replicas), not to the sentinels: sentinels that require a
// password are not supported by this form (build the client with
// redis.NewFailoverClient and goredis.WithFailover instead). No query
// parameters are accepted.
//
// The sentinel hosts are separated by commas, like the URLs of the list:
// a piece of the list that does not start with a scheme ("…://")
// continues the sentinel URL before it, so
//
//	LOCK_DISTRIBUTED_NODES=redis+sentinel://10.0.0.1,10.0.0.2,10.0.0.3/mymaster,redis://10.0.1.1:6379
//
// is two nodes: the master "mymaster" found through three sentinels, and
// a standalone master. The node is a go-redis failover client, named
// after its master name and sentinels (goredis.WithFailover), so the same
// master listed twice is refused. Its writes are not acknowledged by
// replicas: a failover can lose a lock (see goredis.WithReplicaAck).
const SchemeSentinel = "redis+sentinel://"

// DefaultSentinelPort is the port of a sentinel host given without one.
const DefaultSentinelPort = "26379"

// sentinelNode joins urls[i], a sentinel URL, with the pieces after it
// that continue it (no "://" in them: more sentinel hosts, or the rest of
// user info holding a comma), checks it, and returns it with the index
// of its last piece.
func sentinelNode(urls []string, i int) (string, int, error) {
	u := strings.TrimSpace(urls[i])
	for i+1 < len(urls) && !strings.Contains(urls[i+1], "://") {
		i++
		u += "," + strings.TrimSpace(urls[i])
	}
	_, err := parseSentinelURL(u)
	return u, i, err
}

// parseSentinelURL parses a SchemeSentinel URL into the failover client's
// options (ContextTimeoutEnabled set, as the lockers require). Its errors
// quote the URL with its user info masked, and nothing of the user info.
func parseSentinelURL(u string) (*redis.FailoverOptions, error) {
	bad := func(format string, args ...any) (*redis.FailoverOptions, error) {
		return nil, fmt.Errorf("%q: "+format, append([]any{redact.URLs(u)}, args...)...)
	}
	rest, ok := strings.CutPrefix(u, SchemeSentinel)
	if !ok {
		return bad("not a %s URL", SchemeSentinel)
	}
	o := &redis.FailoverOptions{ContextTimeoutEnabled: true}
	// User info ends at the last '@', as redact.URLs masks it.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var uerr, perr error
		o.Username, uerr = url.PathUnescape(user)
		o.Password, perr = url.PathUnescape(pass)
		if uerr != nil || perr != nil {
			return bad("malformed user info (not shown; write a password's special characters as %%XX escapes)")
		}
		rest = rest[at+1:]
	}
	if strings.ContainsAny(rest, "?#") {
		return bad("query parameters and fragments are not supported")
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if strings.TrimSpace(hosts) == "" {
		return bad("no sentinel host")
	}
	for h := range strings.SplitSeq(hosts, ",") {
		addr, err := sentinelAddr(strings.TrimSpace(h))
		if err != nil {
			return bad("sentinel host %q: %v", h, err)
		}
		o.SentinelAddrs = append(o.SentinelAddrs, addr)
	}
	name, db, hasDB := strings.Cut(path, "/")
	if name == "" {
		return bad("no master name: want %shost1,host2/mastername[/db]", SchemeSentinel)
	}
	if strings.ContainsAny(name, ", \t") {
		return bad("master name %q: a comma after the master name must start the next URL of the list, with its scheme", name)
	}
	o.MasterName = name
	if hasDB {
		n, err := strconv.ParseUint(db, 10, 31)
		if err != nil {
			return bad("database %q: want a non-negative integer", db)
		}
		o.DB = int(n)
	}
	return o, nil
}

// sentinelAddr checks one sentinel host, adding DefaultSentinelPort when
// it has no port.
func sentinelAddr(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			host, port, err = h, DefaultSentinelPort, nil
		} else {
			return "", errors.New("want host or host:port")
		}
	}
	if n, perr := strconv.ParseUint(port, 10, 16); host == "" || perr != nil || n == 0 {
		return "", errors.New("want host:port with a port from 1 to 65535")
	}
	return net.JoinHostPort(host, port), nil
}

// openSentinel makes the failover client and node of a SchemeSentinel
// URL. The client is returned, to be closed, even with an error.
func openSentinel(u string) (*redis.Client, redlock.Backend, error) {
	o, err := parseSentinelURL(u)
	if err != nil {
		return nil, nil, &Error{Var: VarNodes, Value: redact.URLs(u), Err: err}
	}
	c := redis.NewFailoverClient(o)
	b, err := goredis.New(c, goredis.WithFailover(o))
	return c, b, err
}
