package envconfig

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/redlock/driver"

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
	// OpenNode opens the node n: its driver.Node, and a Closer for the client
	// it made, which Clients.Close (from OpenWith) closes. On error it
	// closes what it made itself. Bad input (an option the library does
	// not support) is an *Error for VarNodes, with Value n.URL.
	OpenNode func(n Node) (driver.Node, io.Closer, error)
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
	URL        string // the URL with its secrets masked as xxxxx (redact.Value)
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

// String is the node's URL with its secrets masked.
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
// VarNodes and the masked URL, matching redlock.ErrInvalid and err. The
// text of err is masked too (redact.URLs), since a client library's error
// may quote the URL.
func (n Node) Invalid(err error) error {
	return &Error{Var: VarNodes, Value: n.URL, Err: maskedError{err}}
}

// maskedError is an error whose text has the secrets of any URL in it
// masked (redact.URLs); it unwraps to the error itself.
type maskedError struct{ err error }

func (e maskedError) Error() string { return redact.URLs(fmt.Sprint(e.err)) }
func (e maskedError) Unwrap() error { return e.err }

// parseNode parses a node URL of any kind, with its replica_ack
// parameters. Its errors quote the URL with its secrets masked
// (redact.Value) and nothing of the secrets: when the URL does not parse,
// the error is worded from parsing the masked URL instead, so a client
// library that quotes pieces of what it parses quotes only masked text.
func parseNode(u string) (Node, error) {
	n, err := parseNodeText(u)
	if err == nil {
		return n, nil
	}
	masked := redact.Value(u)
	if masked == u { // no user info, no credential parameter
		return Node{}, err
	}
	if _, merr := parseNodeText(masked); merr != nil {
		return Node{}, merr
	}
	return Node{}, fmt.Errorf("%q: malformed user info (not shown; write a password's special characters as %%XX escapes)", masked)
}

// parseNodeText is parseNode on the text u as it is: its errors quote u.
func parseNodeText(u string) (Node, error) {
	rest, ack, err := splitReplicaAck(u) // replicaack.go
	if err != nil {
		return Node{}, err
	}
	if err := refuseCredentialParams(u, rest); err != nil {
		return Node{}, err
	}
	n := Node{URL: redact.Value(u), ReplicaAck: ack.n, ReplicaAckTimeout: ack.timeout}
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
			return Node{}, fmt.Errorf("%q: %w", u, err)
		}
		if err := checkStandaloneAddr(rest); err != nil {
			return Node{}, fmt.Errorf("%q: %w", u, err)
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

// refuseCredentialParams refuses a query parameter of the node URL u
// (rest: u without its replica_ack parameters) that names a credential
// (redact.Credential: password, username, ...): go-redis takes the
// credentials from the user info only, and would report the parameter as
// an unknown option, quoting it.
func refuseCredentialParams(u, rest string) error {
	pu, err := url.Parse(rest)
	if err != nil {
		return nil // the parsers below report it
	}
	names := slices.Sorted(maps.Keys(pu.Query()))
	for _, name := range names {
		if redact.Credential(name) {
			return fmt.Errorf("%q: query parameter %s: not supported: put the user name and password in the URL's user info, %%XX-escaped (%s://user:password@host:port)",
				redact.Value(u), strconv.Quote(name), pu.Scheme)
		}
	}
	return nil
}

// checkStandaloneAddr checks the host and port of a redis:// or rediss://
// URL that redis.ParseURL accepted: go-redis takes a URL without a host
// for localhost:6379 and leaves the port's range to the first dial.
// A unix:// URL has a path instead, which redis.ParseURL checks.
func checkStandaloneAddr(rest string) error {
	pu, err := url.Parse(rest)
	if err != nil || strings.EqualFold(pu.Scheme, "unix") {
		return nil
	}
	scheme := strings.ToLower(pu.Scheme)
	if pu.Hostname() == "" {
		return fmt.Errorf("no host: want %s://host[:port][/db]", scheme)
	}
	if port := pu.Port(); port != "" || strings.HasSuffix(pu.Host, ":") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s: want a number from 1 to 65535 (or none, for 6379)", strconv.Quote(port))
		}
	}
	return nil
}

// ParseNode parses one node URL as Load and Open do, for tools that talk
// to the nodes themselves (redlock inspect and release): its kind, its
// go-redis options and its replica_ack parameters. An error is an *Error
// for VarNodes, the URL masked.
func ParseNode(u string) (Node, error) {
	n, err := parseNode(u)
	if err != nil {
		return Node{}, &Error{Var: VarNodes, Value: redact.Value(u), Err: err}
	}
	return n, nil
}

// listURLError is parseNode's error for URL i of the comma-separated
// list, unless a masked part of the list spans a ',' (a password holding
// one): the URLs Load cut the list into are then not the URLs the masking
// found, URL i masked alone may show a piece of a password, and there is
// nothing safe to quote but its position.
func listURLError(list string, i int, err error) error {
	if strings.Count(redact.Value(list), ",") != strings.Count(list, ",") {
		return fmt.Errorf("URL %d of the list is malformed (not shown: it has user info)", i+1)
	}
	return err
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
func (c Config) nodeOpener(lib Client) (func(Node) (driver.Node, io.Closer, error), error) {
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
func openGoRedis(n Node) (driver.Node, io.Closer, error) {
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
	// The node first, which ends its lingering subscriptions, then the
	// client, which closes every connection.
	return b, closers{b, cl}, nil
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

// openNodes opens every node of c with open: each parsed, its driver.Node
// and its Closer. On error it closes the clients already made.
func (c Config) openNodes(open func(Node) (driver.Node, io.Closer, error)) ([]Node, []driver.Node, []io.Closer, error) {
	var (
		parsed  []Node
		nodes   []driver.Node
		closers []io.Closer
	)
	for _, u := range c.Nodes {
		n, err := ParseNode(u)
		if err == nil {
			var b driver.Node
			var cl io.Closer
			b, cl, err = open(n)
			if err == nil {
				parsed, nodes, closers = append(parsed, n), append(nodes, b), append(closers, cl)
				continue
			}
			if !errors.As(err, new(*Error)) {
				// A library's error may quote the URL: mask its text too.
				err = fmt.Errorf("envconfig: node %q: %w", n.URL, maskedError{err})
			}
		}
		closeAll(closers)
		return nil, nil, nil, err
	}
	return parsed, nodes, closers, nil
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
