package envconfig

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redact"
	"github.com/redis/go-redis/v9"
)

// VarClient chooses the Redis client library the nodes are opened with:
// ClientGoRedis (the default) or ClientRueidis, in any case.
const VarClient = "LOCK_DISTRIBUTED_CLIENT"

// Client library names accepted in Config.Client and
// LOCK_DISTRIBUTED_CLIENT.
const (
	// ClientGoRedis opens every node with github.com/redis/go-redis/v9
	// and package goredis. It is built into this package.
	ClientGoRedis = "go-redis"
	// ClientRueidis opens every node with github.com/redis/rueidis and
	// package rueidisnode. It lives in a module of its own, which this
	// package does not import: a program that offers it opens its
	// configuration with package
	// github.com/quorumlock/redlock/rueidisnode/rueidisenv (see Client).
	ClientRueidis = "rueidis"
)

// rueidisImport is the package that opens ClientRueidis nodes, for the
// error of a program that does not link it.
const rueidisImport = "github.com/quorumlock/redlock/rueidisnode/rueidisenv"

// Client is a client library other than go-redis, given to
// Config.OpenWith: when Config.Client is Name, OpenNode opens every node.
//
// # Why no registry
//
// This package cannot import the rueidis adapter (a module of its own, so
// the core module does not depend on rueidis). Rather than a registry
// that the adapter's package fills from an init function when imported
// for its side effect (database/sql's driver pattern), the program hands
// the library over explicitly: rueidisenv.Open(".env") instead of
// Open(".env"), or cfg.OpenWith(rueidisenv.Client()). It is the same one
// line, there is no global state to guard or to leak between tests, and
// a program that does not link rueidis still gets a clear error naming
// the package to use when the environment asks for it.
type Client struct {
	// Name is the Config.Client value this library answers to, such as
	// ClientRueidis. It must not be ClientGoRedis, which is built in.
	Name string
	// OpenNode opens the node n: its Backend, and a Closer for the client
	// it made, which the Closer that Open returns closes. On error it
	// closes what it made itself. Bad input (an option the library does
	// not support) is an *Error for VarNodes, with Value n.URL.
	OpenNode func(n Node) (redlock.Backend, io.Closer, error)
}

// Node is one URL of Config.Nodes, parsed, as Client.OpenNode gets it.
// The URL syntax is go-redis's for every client library, so the URL is
// given as go-redis parsed it: exactly one of Standalone (redis://,
// rediss://, unix://: redis.ParseURL), Cluster (redis+cluster://:
// redis.ParseClusterURL) and Sentinel (redis+sentinel://:
// redis.ParseFailoverURL, the user info moved to the master, see
// SchemeSentinel) is set, with ContextTimeoutEnabled. A library maps the
// fields it supports and refuses the query parameters it cannot honour
// (Params), rather than ignoring them.
//
// The options hold the password. Printing a Node (String, any fmt verb,
// slog) shows its masked URL only; json.Marshal is not masked.
type Node struct {
	URL        string // the URL with its user info masked as xxxxx
	Standalone *redis.Options
	Cluster    *redis.ClusterOptions
	Sentinel   *redis.FailoverOptions
	// Params are the names of the URL's query parameters (sorted, without
	// duplicates), ParamReplicaAck and ParamReplicaAckTimeout excepted.
	Params []string
	// ReplicaAck replicas must acknowledge every write that grants or
	// keeps a lock, within ReplicaAckTimeout (ParamReplicaAck,
	// ParamReplicaAckTimeout); 0 when the URL does not ask for it.
	ReplicaAck        int
	ReplicaAckTimeout time.Duration
}

// String is the node's URL with its user info masked.
func (n Node) String() string { return n.URL }

// Format implements fmt.Formatter: every verb formats String, %#v in Go
// syntax, so that no verb prints the options and their password.
func (n Node) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "envconfig.Node{URL:%q}", n.URL)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), n.URL)
}

// LogValue implements slog.LogValuer: the masked URL.
func (n Node) LogValue() slog.Value { return slog.StringValue(n.URL) }

// Invalid is the error of an OpenNode that refuses n: an *Error for
// VarNodes and the masked URL, matching redlock.ErrInvalid.
func (n Node) Invalid(err error) error { return &Error{Var: VarNodes, Value: n.URL, Err: err} }

// goRedisURLError is redis.ParseURL's error for a plain node URL, which
// may quote pieces of a password: nodeURLError words it safely.
type goRedisURLError struct{ err error }

func (e goRedisURLError) Error() string { return e.err.Error() }

// parseNode parses a node URL of any kind, with its replica_ack
// parameters. Its errors are safe to show once given to listURLError.
func parseNode(u string) (Node, error) {
	rest, ack, err := splitReplicaAck(u) // replicaack.go
	if err != nil {
		return Node{}, err
	}
	n := Node{URL: redact.URLs(u), ReplicaAck: ack.n, ReplicaAckTimeout: ack.timeout}
	if fo, sentinel, err := sentinelOptions(rest); sentinel { // sentinel.go
		if err != nil {
			return Node{}, err
		}
		n.Sentinel = fo
	} else if co, cluster, err := clusterOptions(rest); cluster {
		if err != nil {
			return Node{}, err
		}
		co.ContextTimeoutEnabled = true
		n.Cluster = co
	} else {
		o, err := redis.ParseURL(rest)
		if err != nil {
			return Node{}, goRedisURLError{err}
		}
		o.ContextTimeoutEnabled = true
		n.Standalone = o
	}
	if pu, err := url.Parse(rest); err == nil { // parsed above already
		for k := range pu.Query() {
			n.Params = append(n.Params, k)
		}
		slices.Sort(n.Params)
	}
	return n, nil
}

// ParseNode parses one node URL as Load and Open do, for tools that talk
// to the nodes themselves (redlock inspect and release): its kind, its
// go-redis options and its replica_ack parameters. An error is an *Error
// for VarNodes, the URL masked.
func ParseNode(u string) (Node, error) {
	n, err := parseNode(u)
	if err != nil {
		return Node{}, &Error{Var: VarNodes, Value: redact.URLs(u), Err: listURLError(u, 0, err)}
	}
	return n, nil
}

// listURLError is parseNode's error for URL i of the comma-separated
// list, worded without a piece of any password in the list.
func listURLError(list string, i int, err error) error {
	if ge := (goRedisURLError{}); errors.As(err, &ge) {
		return nodeURLError(list, i, ge.err)
	}
	return kindURLError(list, i, err)
}

// clientName is c's library name: ClientGoRedis when empty.
func (c Config) clientName() string {
	if c.Client == "" {
		return ClientGoRedis
	}
	return c.Client
}

// nodeOpener picks the library that opens c's nodes: go-redis, or lib
// when c.Client names it.
func (c Config) nodeOpener(lib Client) (func(Node) (redlock.Backend, io.Closer, error), error) {
	switch name := c.clientName(); {
	case name == ClientGoRedis:
		return openGoRedis, nil
	case lib.OpenNode != nil && name == lib.Name:
		return lib.OpenNode, nil
	case name == ClientRueidis:
		return nil, &Error{Var: VarClient, Value: c.Client, Err: fmt.Errorf(
			"this program does not link the rueidis client: open the configuration with %s (rueidisenv.Open, or Config.OpenWith(rueidisenv.Client())), or set %s=%s",
			rueidisImport, VarClient, ClientGoRedis)}
	default:
		return nil, invalidf("Config.Client %q: want %q or %q", c.Client, ClientGoRedis, ClientRueidis)
	}
}

// openGoRedis opens n with go-redis: a failover client (named after its
// master and sentinels), a cluster client or a plain client, with
// goredis.WithReplicaAck when the URL asks for it. go-redis clients do
// not connect until their first command.
func openGoRedis(n Node) (redlock.Backend, io.Closer, error) {
	var (
		cl   redis.UniversalClient
		opts []goredis.Option
	)
	switch {
	case n.Sentinel != nil:
		cl = redis.NewFailoverClient(n.Sentinel)
		opts = append(opts, goredis.WithFailover(n.Sentinel))
	case n.Cluster != nil:
		cl = redis.NewClusterClient(n.Cluster)
	default:
		cl = redis.NewClient(n.Standalone)
	}
	if n.ReplicaAck > 0 {
		opts = append(opts, goredis.WithReplicaAck(n.ReplicaAck, n.ReplicaAckTimeout))
	}
	b, err := goredis.New(cl, opts...)
	if err != nil {
		cl.Close()
		return nil, nil, n.Invalid(err)
	}
	if own, ok := b.(io.Closer); ok {
		// The node's own connection (goredis.New) outlives the client:
		// close both.
		return b, closers{own, cl}, nil
	}
	return b, cl, nil
}

// closers closes each of its Closers, returning the first error.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// openNodes opens every node of c with open. On error it closes the
// clients already made.
func (c Config) openNodes(open func(Node) (redlock.Backend, io.Closer, error)) ([]redlock.Backend, []io.Closer, error) {
	var (
		nodes   []redlock.Backend
		closers []io.Closer
	)
	for _, u := range c.Nodes {
		n, err := ParseNode(u)
		if err == nil {
			var b redlock.Backend
			var cl io.Closer
			b, cl, err = open(n)
			if err == nil {
				nodes, closers = append(nodes, b), append(closers, cl)
				continue
			}
			if !errors.As(err, new(*Error)) {
				err = fmt.Errorf("envconfig: node %q: %w", n.URL, err)
			}
		}
		closeAll(closers)
		return nil, nil, err
	}
	return nodes, closers, nil
}

func closeAll(closers []io.Closer) error {
	var errs []error
	for _, cl := range closers {
		if cl != nil {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// validClientName reports whether name is a client library Load accepts.
func validClientName(name string) bool {
	return name == ClientGoRedis || name == ClientRueidis
}

// parseClientName is LOCK_DISTRIBUTED_CLIENT's value, lower-cased, or an
// error.
func parseClientName(v string) (string, error) {
	if name := strings.ToLower(v); validClientName(name) {
		return name, nil
	}
	return "", fmt.Errorf("want %s or %s", ClientGoRedis, ClientRueidis)
}
