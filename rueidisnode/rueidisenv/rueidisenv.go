// Package rueidisenv opens an envconfig configuration with the rueidis
// client: LOCK_DISTRIBUTED_CLIENT=rueidis. Package envconfig, in the core
// module, cannot import rueidis (a module of its own, so the core does
// not depend on it); a program that offers rueidis opens its
// configuration here instead:
//
//	locker, closer, err := rueidisenv.Open(".env") // instead of envconfig.Open(".env")
//
// or, with a Config of its own, cfg.OpenWith(rueidisenv.Client(), opts...).
// Either opens go-redis nodes as envconfig does when
// LOCK_DISTRIBUTED_CLIENT is go-redis (or unset), and rueidis nodes
// (rueidisnode.New) when it is rueidis. The choice is a call, not an
// import for its side effect: see envconfig.Client.
//
// # Node URLs
//
// The URLs are the same as with go-redis (see package envconfig), mapped
// onto rueidis.ClientOption:
//
//   - redis://, rediss://, unix://: one master (ForceSingleClient, so a
//     server that is a cluster member is not taken for a cluster);
//   - redis+cluster://: a rueidis cluster client over the seeds, refused
//     when the servers are not a cluster;
//   - redis+sentinel://: a rueidis Sentinel client of master_name, the
//     user info authenticating to the master.
//
// Of go-redis's query parameters only addr, master_name, db,
// dial_timeout, client_name and skip_verify (rediss) have a rueidis
// equivalent; any other (pool_size, read_timeout, ...) is refused with an
// *envconfig.Error for LOCK_DISTRIBUTED_NODES rather than ignored.
// Replica acknowledgement (replica_ack, replica_ack_timeout) is
// rueidisnode.WithReplicaAck. Client-side caching is off (DisableCache:
// the lockers read nothing), ConnLifetime is left at zero as rueidisnode
// requires, and rueidis's other defaults are kept.
//
// Unlike go-redis, rueidis connects when the client is made: an
// unreachable node fails Open (with an error that does not match
// redlock.ErrInvalid), not the first Lock.
package rueidisenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/rueidisnode"
	"github.com/redis/rueidis"
)

// Client is the rueidis client library for envconfig.Config.OpenWith.
func Client() envconfig.Client {
	return envconfig.Client{Name: envconfig.ClientRueidis, OpenNode: OpenNode}
}

// Open is envconfig.Open for a program that offers rueidis: it reads the
// process environment and then the given .env files (envconfig.Lookup),
// loads the configuration (envconfig.Load) and opens it with OpenWith and
// Client.
func Open(dotenv ...string) (*redlock.Redlock, *envconfig.Clients, error) {
	lookup, err := envconfig.Lookup(dotenv...)
	if err != nil {
		return nil, nil, err
	}
	c, err := envconfig.Load(lookup)
	if err != nil {
		return nil, nil, err
	}
	return c.OpenWith(Client())
}

// supported are the query parameters of a node URL that this package
// maps onto rueidis options.
var supported = []string{"addr", "client_name", "db", "dial_timeout", "master_name", "skip_verify"}

// OpenNode opens the node n with a rueidis client and rueidisnode.New
// (see the package documentation for the URL mapping). It is
// Client().OpenNode.
func OpenNode(n envconfig.Node) (driver.Node, io.Closer, error) {
	opt, err := clientOption(n)
	if err != nil {
		return nil, nil, err
	}
	// The option names a cluster or Sentinel node as goredis does
	// (rueidisnode.New refuses those clients without it).
	opts := []rueidisnode.Option{rueidisnode.WithClientOption(opt)}
	if n.ReplicaAck > 0 {
		opts = append(opts, rueidisnode.WithReplicaAck(n.ReplicaAck, n.ReplicaAckTimeout))
	}
	c, err := rueidis.NewClient(rueidisnode.Guard(opt))
	if err != nil {
		return nil, nil, fmt.Errorf("rueidis: %w", err)
	}
	if want := wantMode(n); c.Mode() != want {
		c.Close()
		return nil, nil, n.Invalid(fmt.Errorf("the rueidis client is in %s mode, not %s as the URL says", c.Mode(), want))
	}
	b, err := rueidisnode.New(c, opts...)
	if err != nil {
		c.Close()
		return nil, nil, n.Invalid(err)
	}
	return b, closer{c}, nil
}

// wantMode is the rueidis mode n's kind of URL asks for.
func wantMode(n envconfig.Node) rueidis.ClientMode {
	switch {
	case n.Cluster != nil:
		return rueidis.ClientModeCluster
	case n.Sentinel != nil:
		return rueidis.ClientModeSentinel
	default:
		return rueidis.ClientModeStandalone
	}
}

// clientOption maps n onto rueidis's options, refusing what rueidis
// cannot do as the URL asks.
func clientOption(n envconfig.Node) (rueidis.ClientOption, error) {
	for _, p := range n.Params {
		if !slices.Contains(supported, p) {
			return rueidis.ClientOption{}, n.Invalid(fmt.Errorf("query parameter %s: not supported with %s=%s (supported: %v)",
				p, envconfig.VarClient, envconfig.ClientRueidis, supported))
		}
	}
	opt := rueidis.ClientOption{DisableCache: true}
	switch {
	case n.Standalone != nil:
		o := n.Standalone
		opt.InitAddress = []string{o.Addr}
		opt.ForceSingleClient = true
		if o.Network == "unix" {
			opt.DialCtxFn = dialUnix
		}
		setCommon(&opt, o.Username, o.Password, o.ClientName, o.TLSConfig)
		opt.SelectDB = o.DB
		opt.Dialer.Timeout = o.DialTimeout
	case n.Cluster != nil:
		o := n.Cluster
		opt.InitAddress = slices.Clone(o.Addrs)
		setCommon(&opt, o.Username, o.Password, o.ClientName, o.TLSConfig)
		opt.Dialer.Timeout = o.DialTimeout
	case n.Sentinel != nil:
		o := n.Sentinel
		opt.InitAddress = slices.Clone(o.SentinelAddrs)
		setCommon(&opt, o.Username, o.Password, o.ClientName, o.TLSConfig)
		opt.SelectDB = o.DB
		opt.Dialer.Timeout = o.DialTimeout
		opt.Sentinel = rueidis.SentinelOption{MasterSet: o.MasterName, TLSConfig: opt.TLSConfig, Dialer: opt.Dialer, ClientName: o.ClientName}
	default:
		return rueidis.ClientOption{}, n.Invalid(errors.New("no options: not a Node from envconfig"))
	}
	return opt, nil
}

// setCommon sets the options every kind of node has.
func setCommon(opt *rueidis.ClientOption, user, password, name string, tlsConfig *tls.Config) {
	opt.Username, opt.Password, opt.ClientName = user, password, name
	if tlsConfig != nil {
		opt.TLSConfig = tlsConfig.Clone()
	}
}

// dialUnix dials a unix:// URL's socket, as rueidis.ParseURL does.
func dialUnix(ctx context.Context, path string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	return d.DialContext(ctx, "unix", path)
}

// closer closes a rueidis client, whose Close returns nothing.
type closer struct{ c rueidis.Client }

func (c closer) Close() error {
	c.c.Close()
	return nil
}
