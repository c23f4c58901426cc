package envconfig

import (
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SchemeSentinel starts the URL of a master behind Redis Sentinel in
// LOCK_DISTRIBUTED_NODES, go-redis's ParseFailoverURL form under a
// scheme of its own (rediss+sentinel:// for TLS):
//
//	redis+sentinel://[user:password@]host1[:port][/db]?master_name=NAME[&addr=host2:port...]
//
// The URL's host and every addr query parameter are the sentinels (the
// URL's host on port 26379 when it has none; an addr needs its port), so
// no comma is needed between them. master_name, required, is the name
// they monitor the master under; db the database (0 when left out), in
// the path or as a db query parameter. The other query parameters are
// ParseFailoverURL options (dial_timeout, read_timeout, ...).
//
// Unlike ParseFailoverURL, which gives the user info to the sentinels,
// the user info (%XX-escaped as in a redis:// URL) authenticates to the
// master and replicas, as in a redis:// or redis+cluster:// URL: sentinels
// that require a password are not supported by this form (build the
// client with redis.NewFailoverClient and goredis.WithFailover instead).
// Query parameters that name credentials (username, password,
// sentinel_password, ...) are refused, as in every node URL: the user info
// is the one place for them.
//
// For example
//
//	LOCK_DISTRIBUTED_NODES=redis+sentinel://10.0.0.1?master_name=mymaster&addr=10.0.0.2:26379&addr=10.0.0.3:26379,redis://10.0.1.1:6379
//
// is two nodes: the master "mymaster" found through three sentinels, and
// a standalone master. The node is a go-redis failover client, named
// after its master name and sentinels (goredis.WithFailover), so the same
// master listed twice is refused. Its writes are not acknowledged by
// replicas unless the URL asks for it (ParamReplicaAck): without it a
// failover can lose a lock (see goredis.WithReplicaAck).
const SchemeSentinel = "redis+sentinel://"

// DefaultSentinelPort is the port of a sentinel URL's host given without
// one (ParseFailoverURL would use 6379, a master's port).
const DefaultSentinelPort = "26379"

// sentinelOptions parses a redis+sentinel:// (or rediss+sentinel://) URL
// into the failover client's options (ContextTimeoutEnabled set, as the
// lockers require). sentinel is false for any other scheme, which is not
// an error. Errors quote the URL with its user info masked, and nothing
// of the user info.
func sentinelOptions(u string) (o *redis.FailoverOptions, sentinel bool, err error) {
	k, sentinel, err := parseKindURL(u, "sentinel", DefaultSentinelPort)
	if !sentinel || err != nil {
		return nil, sentinel, err
	}
	q := k.u.Query()
	if q.Get("master_name") == "" {
		return nil, true, k.errorf("no master name: want %s://host1[:port][/db]?master_name=NAME[&addr=host2:port...]", k.scheme)
	}
	// ParseFailoverURL takes a negative database: check both places.
	for _, db := range []string{strings.TrimPrefix(k.u.Path, "/"), q.Get("db")} {
		if _, err := strconv.ParseUint(db, 10, 31); db != "" && err != nil {
			return nil, true, k.errorf("database %s: want a non-negative integer", k.quote(db))
		}
	}
	o, err = redis.ParseFailoverURL(k.u.String())
	if err != nil {
		return nil, true, k.goRedisError(err)
	}
	// The user info is the master's, not the sentinels' (see SchemeSentinel).
	o.Username, o.Password = o.SentinelUsername, o.SentinelPassword
	o.SentinelUsername, o.SentinelPassword = "", ""
	o.ContextTimeoutEnabled = true
	return o, true, nil
}
