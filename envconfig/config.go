// Package envconfig builds a redlock.Locker from LOCK_DISTRIBUTED_*
// environment variables and .env files: the configuration conventions of
// the framework the library was written for, kept apart from the lock
// algorithm in package redlock.
//
// A service reads its locker once at start-up and closes the Redis
// clients when it stops:
//
//	locker, clients, err := envconfig.Open(".env") // environment first, then the file
//	if err != nil {
//		log.Fatal(err) // envconfig: invalid LOCK_DISTRIBUTED_TTL="ten": ...
//	}
//	defer clients.Close()
//	log.Printf("locking: %v", clients) // enabled: strategy retry, ... or disabled: every lock is granted without Redis; ...
//	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//	defer cancel()
//	if err := clients.Ping(ctx); err != nil { // fail at start, not at the first lock
//		log.Fatal(err) // envconfig: node "redis://xxxxx@10.0.0.1:6379": authentication failed: WRONGPASS ...
//	}
//
// Open is Lookup, Load and Config.Open in one call; each can be used on
// its own: Load takes any lookup function, so tests never touch the
// process environment, and Config.Open takes extra redlock options.
//
// # Variables and defaults
//
// The variables' names are the Var* constants. An unset variable, or one
// set to the empty string or to blanks only, takes its default:
//
//	LOCK_DISTRIBUTED_ENABLED      false   true/false, 1/0, t/f (strconv.ParseBool)
//	LOCK_DISTRIBUTED_STRATEGY     retry   retry or reject, any case
//	LOCK_DISTRIBUTED_TTL          10      whole seconds, 1 or more (DefaultTTL)
//	LOCK_DISTRIBUTED_RETRY        3       whole retries after the first attempt, 0 or more
//	                                      (DefaultRetries)
//	LOCK_DISTRIBUTED_RETRY_DELAY  100     whole milliseconds before the first retry, 0 or
//	                                      more, doubled for each further one (DefaultRetryDelay)
//	LOCK_DISTRIBUTED_NODES        (none)  comma-separated redis:// URLs; required when enabled,
//	                                      refused by Open when ENABLED is not set
//	                                      (redis+cluster:// for a Redis Cluster as one node,
//	                                      redis+sentinel:// for a master behind Sentinel)
//	LOCK_DISTRIBUTED_CLIENT       go-redis  the client library: go-redis or rueidis, any case
//
// These defaults are the seed configuration's, defined by this package:
// they do not follow the defaults of package redlock's own options.
//
// # Redis Cluster
//
// A URL with the scheme redis+cluster (rediss+cluster for TLS) is a whole
// Redis Cluster as one node (see goredis.New): its seed addresses are the
// URL's host and each addr query parameter, since a comma would end the
// URL in the list:
//
//	redis+cluster://[user:password@]host1:7000[/0]?addr=host2:7001&addr=host3:7002
//
// The other query parameters are go-redis's ParseClusterURL options
// (dial_timeout, read_timeout, ...). A cluster has database 0 only: any
// other database in the path is an error, as is a URL without a host or
// with a bad port. It may be mixed with redis:// URLs in one list.
//
// # Redis Sentinel
//
// A URL with the scheme redis+sentinel (rediss+sentinel for TLS) is a
// master behind Redis Sentinel as one node, in go-redis's
// ParseFailoverURL form: the sentinels are the URL's host (port 26379
// when left out) and each addr query parameter, the master's name the
// master_name query parameter (required):
//
//	redis+sentinel://[user:password@]host1[:26379][/db]?master_name=NAME[&addr=host2:26379...]
//
// The user info authenticates to the master, not to the sentinels; the
// database is non-negative; the other query parameters are
// ParseFailoverURL options. See SchemeSentinel.
//
// # Replica acknowledgement
//
// A node URL may ask that every write granting or keeping a lock wait for
// replicas (goredis.WithReplicaAck), with two query parameters of this
// package, taken out before go-redis parses the URL:
//
//	redis+sentinel://10.0.0.1?master_name=mymaster&replica_ack=1&replica_ack_timeout=500ms
//
// See ParamReplicaAck. Without them a failover can lose a lock. On a
// redis+cluster:// URL they are passed to goredis.New, which decides
// whether a cluster client takes them; the rueidis client refuses them.
//
// # Client library
//
// LOCK_DISTRIBUTED_CLIENT chooses the library the nodes are opened with;
// the URLs are the same for both. go-redis is built in. rueidis lives in
// a module of its own, which this package cannot import: a program that
// offers it opens its configuration with
// github.com/quorumlock/redlock/rueidisnode/rueidisenv (rueidisenv.Open
// instead of Open). Any other program given
// LOCK_DISTRIBUTED_CLIENT=rueidis fails to open, with an *Error naming
// that package. See Client for why this is an explicit call and not a
// registry filled by an import.
//
// # Passwords
//
// A node URL may hold a password, in its user info only
// (redis://user:password@host:port, special characters %XX-escaped): a
// query parameter that names a credential (password, username, ...) is
// refused. Every error of this package, and every way of printing a
// Config or a Node, shows the user info of each URL as xxxxx, however
// malformed the URL (the user info ends at the URL's last '@'), and the
// value of a credential parameter as xxxxx, so they are safe to log. The
// one thing the list syntax cannot tell apart: a password holding a ','
// followed by a scheme and "://" is read as the start of the next URL of
// the list; %XX-escape it.
package envconfig

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redact"
	"github.com/redis/go-redis/v9"
)

// The environment variables read by Load. Their meaning and defaults
// follow the framework documentation the library was written for; NODES is
// this library's addition, since the lock needs to know where Redis is.
const (
	VarEnabled    = "LOCK_DISTRIBUTED_ENABLED"     // true or false; default false
	VarStrategy   = "LOCK_DISTRIBUTED_STRATEGY"    // retry or reject; default retry
	VarTTL        = "LOCK_DISTRIBUTED_TTL"         // whole seconds; default 10
	VarRetry      = "LOCK_DISTRIBUTED_RETRY"       // retries after the first attempt; default 3
	VarRetryDelay = "LOCK_DISTRIBUTED_RETRY_DELAY" // milliseconds before the first retry; default 100
	VarNodes      = "LOCK_DISTRIBUTED_NODES"       // comma-separated redis:// URLs
)

// Strategy names accepted in Config.Strategy and LOCK_DISTRIBUTED_STRATEGY.
const (
	StrategyRetry  = "retry"
	StrategyReject = "reject"
)

// The values Load gives a Config for the variables that are not set: the
// seed configuration's TTL of 10 s, and retry waits of 100, 200 and 400 ms.
const (
	DefaultTTL        = 10 * time.Second
	DefaultRetries    = 3
	DefaultRetryDelay = 100 * time.Millisecond
)

// Config is a locker described the way an application's deployment
// describes it: by LOCK_DISTRIBUTED_* variables. Load fills it from
// the environment (or any lookup function, so tests never touch the
// process environment), and Open turns it into a redlock.Locker.
//
// A Config built by hand must set every field a locker needs: Open does
// not fill in defaults, it refuses a zero TTL or an empty Strategy. The
// defaults Load uses are DefaultTTL, DefaultRetries and DefaultRetryDelay.
type Config struct {
	// Enabled switches distributed locking on. When it is false Open
	// returns a locker that grants every lock at once without any Redis,
	// so the same application code runs on a laptop and in a cluster, and
	// says so (Clients.Disabled). Load leaves it false when
	// LOCK_DISTRIBUTED_ENABLED is not set, and Open then refuses the
	// Config if it has Nodes: nodes are no reason to believe in a lock
	// that excludes nothing.
	Enabled bool
	// Strategy is StrategyRetry (wait with exponential backoff) or
	// StrategyReject (fail at once when the lock is held).
	Strategy string
	// TTL is how long a lock lives on Redis before it expires by itself.
	TTL time.Duration
	// Retries is how many attempts follow the first one under
	// StrategyRetry. Ignored by StrategyReject.
	Retries int
	// RetryDelay is the wait before the first retry; retry i waits
	// RetryDelay·2^i. Ignored by StrategyReject.
	RetryDelay time.Duration
	// Nodes are the redis:// (or rediss://, unix://) URLs of the masters,
	// in the syntax of redis.ParseURL, redis+cluster:// URLs of Redis
	// Clusters or redis+sentinel:// URLs of masters behind Sentinel (see
	// the package documentation), any of them with the replica_ack
	// parameters (ParamReplicaAck). One URL gives a redlock.NewSingle,
	// several a redlock.Redlock over independent masters. Required when Enabled.
	//
	// Load and Open check every URL: its scheme, a host (go-redis would
	// take a URL without one for localhost:6379) and, when it has one, a
	// port from 1 to 65535; a unix:// URL needs a socket path.
	//
	// A URL may hold a password. Printing a Config (any fmt verb, String,
	// slog) shows each URL's user info as xxxxx (see Passwords in the
	// package documentation); the field itself is never changed.
	Nodes []string
	// Client is the Redis client library the nodes are opened with:
	// ClientGoRedis (Load's default; the empty string means it too, so
	// Configs built by hand before this field existed keep working) or
	// ClientRueidis, which only OpenWith opens (see Client).
	Client string

	// enabledUnset is set by Load when NODES is given and ENABLED is not:
	// Open refuses such a Config rather than lock nothing (see Load).
	enabledUnset bool
}

// redacted returns c with the secrets of its node URLs masked.
func (c Config) redacted() Config {
	if c.Nodes != nil {
		nodes := make([]string, len(c.Nodes))
		for i, u := range c.Nodes {
			nodes[i] = redact.Value(u)
		}
		c.Nodes = nodes
	}
	return c
}

// Disabled is how String starts for a Config that is not Enabled.
const Disabled = "disabled: every lock is granted without Redis"

// String describes c in one line, the secrets of every node URL masked
// (user info and credential parameters shown as xxxxx):
//
//	enabled: strategy retry, ttl 10s, retries 3, retry delay 100ms, client go-redis, nodes [redis://xxxxx@10.0.0.1:6379 redis://10.0.0.2:6379]
//	disabled: every lock is granted without Redis; strategy retry, ttl 10s, retries 3, retry delay 100ms, client go-redis, nodes []
func (c Config) String() string {
	r := c.redacted()
	state := "enabled:"
	switch {
	case !c.Enabled && c.enabledUnset && len(c.Nodes) > 0:
		state = "not enabled: " + VarEnabled + " is not set, so Open refuses these nodes;"
	case !c.Enabled:
		state = Disabled + ";"
	}
	return fmt.Sprintf("%s strategy %s, ttl %v, retries %d, retry delay %v, client %s, nodes [%s]",
		state, r.Strategy, r.TTL, r.Retries, r.RetryDelay, r.clientName(), strings.Join(r.Nodes, " "))
}

// GoString is c in Go syntax, for %#v, the secrets of its node URLs
// masked.
func (c Config) GoString() string {
	r := c.redacted()
	return fmt.Sprintf("envconfig.Config{Enabled:%#v, Strategy:%#v, TTL:%#v, Retries:%#v, RetryDelay:%#v, Nodes:%#v, Client:%#v}",
		r.Enabled, r.Strategy, int64(r.TTL), r.Retries, int64(r.RetryDelay), r.Nodes, r.Client)
}

// Format implements fmt.Formatter so that no verb prints a password: %v
// and %s print String, %q quotes it, %x and %X print it in hex, %+v
// prints the fields with their names as for any struct, %#v prints
// GoString; any other verb is reported as fmt reports a wrong verb, with
// String. Widths and flags apply as for a string.
func (c Config) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		io.WriteString(f, c.GoString())
	case verb == 'v' && f.Flag('+'):
		r := c.redacted()
		fmt.Fprintf(f, "{Enabled:%v Strategy:%s TTL:%v Retries:%d RetryDelay:%v Nodes:%v Client:%s}",
			r.Enabled, r.Strategy, r.TTL, r.Retries, r.RetryDelay, r.Nodes, r.Client)
	case verb == 'v' || verb == 's' || verb == 'q' || verb == 'x' || verb == 'X':
		fmt.Fprintf(f, fmt.FormatString(f, verb), c.String())
	default:
		fmt.Fprintf(f, "%%!%c(envconfig.Config=%s)", verb, c.String())
	}
}

// LogValue implements slog.LogValuer: a group of the fields, with the
// secrets of the node URLs masked.
func (c Config) LogValue() slog.Value {
	r := c.redacted()
	return slog.GroupValue(
		slog.Bool("enabled", r.Enabled),
		slog.String("strategy", r.Strategy),
		slog.Duration("ttl", r.TTL),
		slog.Int("retries", r.Retries),
		slog.Duration("retry_delay", r.RetryDelay),
		slog.Any("nodes", r.Nodes),
		slog.String("client", r.Client),
	)
}

// Error reports a malformed configuration variable. It matches
// redlock.ErrInvalid, and also the parse error underneath (such as
// strconv.ErrSyntax) when there is one.
//
// It never holds a password: the errors this package returns carry the
// value with the user info and credential parameters of every URL in it
// replaced by xxxxx (see Passwords in the package documentation), and an
// error about a node URL is worded from that masked text, so it is safe
// to log (log.Fatal(err)) or print with any verb.
type Error struct {
	Var   string // the variable, e.g. "LOCK_DISTRIBUTED_TTL"
	Value string // its value as found, URL secrets masked as xxxxx
	Err   error  // what is wrong with it
}

// Error masks the secrets of the URLs in Value (redact.Value) also when
// the Error was built elsewhere.
func (e *Error) Error() string {
	return fmt.Sprintf("envconfig: invalid %s=%q: %v", e.Var, redact.Value(e.Value), e.Err)
}

// Unwrap returns redlock.ErrInvalid and the underlying error.
func (e *Error) Unwrap() []error { return []error{redlock.ErrInvalid, e.Err} }

// invalidf returns an error that matches redlock.ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: envconfig: "+format, append([]any{redlock.ErrInvalid}, args...)...)
}

// Load reads the LOCK_DISTRIBUTED_* variables through lookup (use
// os.LookupEnv, or Lookup to add .env files) and returns the Config
// they describe. An unset variable, or one set to the empty string or to
// blanks only, takes its default (see the table in the package
// documentation): Enabled false, StrategyRetry, DefaultTTL,
// DefaultRetries, DefaultRetryDelay and no Nodes. TTL is a whole number of
// seconds from 1, RETRY of retries and RETRY_DELAY of milliseconds from 0:
// digits only, no sign or unit. Each variable has one error message,
// which says that form with an example:
//
//	envconfig: invalid LOCK_DISTRIBUTED_TTL="10s": want a positive whole number of seconds, such as 10
//
// Every variable is checked even when locking is disabled or the strategy
// ignores it, so a typo is found on the laptop and not in production. A
// malformed value is an *Error naming the variable and the value; it
// matches redlock.ErrInvalid. LOCK_DISTRIBUTED_ENABLED=true without NODES is an
// error too.
//
// NODES given while ENABLED is not set is a configuration that would
// lock nothing, silently: Load returns its Config (tools that only read
// the nodes can use it), and Config.Open refuses it with an *Error that
// says to set ENABLED to true, or to false for the no-op.
func Load(lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		return Config{}, invalidf("nil lookup function")
	}
	get := func(name string) (string, string, bool) {
		raw, ok := lookup(name)
		v := strings.TrimSpace(raw)
		return raw, v, ok && v != ""
	}
	c := Config{
		Strategy:   StrategyRetry,
		TTL:        DefaultTTL,
		Retries:    DefaultRetries,
		RetryDelay: DefaultRetryDelay,
		Client:     ClientGoRedis,
	}
	bad := func(name, raw string, err error) (Config, error) {
		return Config{}, &Error{Var: name, Value: redact.Value(raw), Err: err}
	}

	_, _, enabledSet := get(VarEnabled)
	if raw, v, ok := get(VarEnabled); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad(VarEnabled, raw, errors.New("want true or false"))
		}
		c.Enabled = b
	}
	if raw, v, ok := get(VarStrategy); ok {
		switch s := strings.ToLower(v); s {
		case StrategyRetry, StrategyReject:
			c.Strategy = s
		default:
			return bad(VarStrategy, raw, errors.New("want retry or reject"))
		}
	}
	if raw, v, ok := get(VarTTL); ok {
		d, err := ttlForm.parse(v)
		if err != nil {
			return bad(VarTTL, raw, err)
		}
		c.TTL = d
	}
	if raw, v, ok := get(VarRetry); ok {
		n, err := retryForm.parse(v)
		if err != nil {
			return bad(VarRetry, raw, err)
		}
		c.Retries = int(n)
	}
	if raw, v, ok := get(VarRetryDelay); ok {
		d, err := retryDelayForm.parse(v)
		if err != nil {
			return bad(VarRetryDelay, raw, err)
		}
		c.RetryDelay = d
	}
	if raw, v, ok := get(VarNodes); ok {
		for i, u := range strings.Split(v, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				return bad(VarNodes, raw, errors.New("empty URL in the list"))
			}
			if _, err := parseNode(u); err != nil { // client.go
				return bad(VarNodes, raw, listURLError(v, i, err))
			}
			c.Nodes = append(c.Nodes, u)
		}
	}
	if raw, v, ok := get(VarClient); ok {
		name, err := parseClientName(v)
		if err != nil {
			return bad(VarClient, raw, err)
		}
		c.Client = name
	}
	if c.Enabled && len(c.Nodes) == 0 {
		raw, _ := lookup(VarNodes)
		return bad(VarNodes, raw, fmt.Errorf("required when %s is true", VarEnabled))
	}
	c.enabledUnset = !enabledSet && len(c.Nodes) > 0
	return c, nil
}

// countForm is the form of a variable that holds a whole number of some
// unit, and the one message Load gives for any other value of it.
type countForm struct {
	want string        // the accepted form, with its unit and an example
	min  uint64        // the least value accepted, 0 or 1
	unit time.Duration // what one stands for: a second, a millisecond, 1
}

// The forms of LOCK_DISTRIBUTED_TTL, _RETRY and _RETRY_DELAY.
var (
	ttlForm        = countForm{"a positive whole number of seconds, such as 10", 1, time.Second}
	retryForm      = countForm{"a whole number of retries, 0 or more, such as 3", 0, 1}
	retryDelayForm = countForm{"a whole number of milliseconds, 0 or more, such as 100", 0, time.Millisecond}
)

// parse parses s, decimal digits only (no sign, no unit), into that many
// units. Any other value is a *formError saying f.want; one too large for
// a time.Duration says the largest value too.
func (f countForm) parse(s string) (time.Duration, error) {
	limit := uint64(math.MaxInt64 / int64(f.unit))
	n, err := strconv.ParseUint(s, 10, 64)
	if ne := (*strconv.NumError)(nil); errors.As(err, &ne) {
		// ne.Err (ErrSyntax, ErrRange) only: ne quotes the value, which the
		// Error shows already, masked.
		err = ne.Err
	}
	switch {
	case errors.Is(err, strconv.ErrRange) || err == nil && n > limit:
		return 0, &formError{fmt.Sprintf("want %s (at most %d)", f.want, limit), strconv.ErrRange}
	case err != nil || n < f.min:
		return 0, &formError{"want " + f.want, err}
	}
	return time.Duration(n) * f.unit, nil
}

// formError is a value that does not have its variable's form: its text
// is what the form is, and it unwraps to the parse error (strconv.ErrSyntax
// or strconv.ErrRange), if any.
type formError struct {
	want string
	err  error
}

func (e *formError) Error() string { return e.want }
func (e *formError) Unwrap() error { return e.err }

// Options returns the locker options the Config describes: its TTL and
// strategy (Reject for StrategyReject, Retry(Retries, RetryDelay)
// otherwise). Use them to build a locker over Backends of your own; the
// locker's constructor then reports a bad TTL, retry count or delay as
// redlock.ErrInvalid. Open also checks Strategy itself.
func (c Config) Options() []redlock.Option {
	s := redlock.Retry(c.Retries, c.RetryDelay)
	if c.Strategy == StrategyReject {
		s = redlock.Reject()
	}
	return []redlock.Option{redlock.WithTTL(c.TTL), redlock.WithStrategy(s)}
}

func (c Config) validate() error {
	if c.Strategy != StrategyRetry && c.Strategy != StrategyReject {
		return invalidf("Config.Strategy %q: want %q or %q", c.Strategy, StrategyRetry, StrategyReject)
	}
	if c.Enabled && len(c.Nodes) == 0 {
		return invalidf("Config.Nodes: required when Enabled")
	}
	if c.enabledUnset && !c.Enabled && len(c.Nodes) > 0 {
		return &Error{Var: VarNodes, Value: redact.Value(strings.Join(c.Nodes, ",")), Err: fmt.Errorf(
			"%s is not set, so these nodes would lock nothing: set %s=true to lock through them, "+
				"or %s=false to run without locking (every lock granted, no mutual exclusion)", VarEnabled, VarEnabled, VarEnabled)}
	}
	if !validClientName(c.clientName()) {
		return invalidf("Config.Client %q: want %q or %q", c.Client, ClientGoRedis, ClientRueidis)
	}
	// TTL, retries and delay, as Lock would check them: building a locker
	// checks its options, and has no other effect.
	_, err := redlock.NewSingle(&alwaysGrant{}, c.Options()...)
	return err
}

// Open returns the Locker the Config describes, and the Clients it
// made: close them when the application stops (Close is safe to call more
// than once). opts are appended after the Config's own options, so they
// can add to them (redlock.WithNodeTimeout, for instance) or override
// them.
//
// Enabled, the Redlock is over the Config's nodes (one node: the
// single-instance lock). Open opens go-redis clients (see openGoRedis): a
// Config whose Client is ClientRueidis is an *Error for VarClient naming
// the package that opens it (use OpenWith). Every client is made from its
// URL as Load parsed it, with ContextTimeoutEnabled set, as the lockers
// require, and replica acknowledgement when the URL asks for it
// (ParamReplicaAck). A Config that Load made from NODES without ENABLED is
// refused (see Load).
//
// Not Enabled gives a Redlock over an in-process node that grants every
// lock at once, even one already held: the application's
// locking code runs unchanged, without mutual exclusion and without
// Redis. Open reports it: Clients.Disabled is true, and the Clients print
// (String, any fmt verb, slog) as Disabled says. The client library is
// checked even then, so a program that cannot open the configured library
// fails on the laptop too.
//
// Open does not contact Redis: call Clients.Ping for a deployment to fail
// at start when a node does not answer; otherwise an unreachable node
// shows up on the first Lock as redlock.ErrUnavailable.
func (c Config) Open(opts ...redlock.Option) (*redlock.Redlock, *Clients, error) {
	return c.open(Client{}, opts)
}

// OpenWith is Open for a program that links a client library other than
// go-redis, lib (see Client): when c.Client is lib.Name, lib opens every
// node; otherwise OpenWith is Open. A library may contact the nodes while
// opening them (rueidis connects at once), so with it an unreachable node
// can fail OpenWith itself, with an error that does not match
// redlock.ErrInvalid.
func (c Config) OpenWith(lib Client, opts ...redlock.Option) (*redlock.Redlock, *Clients, error) {
	if lib.Name == "" || lib.Name == ClientGoRedis || lib.OpenNode == nil {
		return nil, nil, invalidf("OpenWith: Client %q: want a name other than %q and an OpenNode", lib.Name, ClientGoRedis)
	}
	return c.open(lib, opts)
}

func (c Config) open(lib Client, opts []redlock.Option) (*redlock.Redlock, *Clients, error) {
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	openNode, err := c.nodeOpener(lib) // client.go
	if err != nil {
		return nil, nil, err
	}
	opts = append(c.Options(), opts...)
	if !c.Enabled {
		s, err := redlock.NewSingle(&alwaysGrant{}, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s, &Clients{cfg: c}, nil
	}
	parsed, nodes, closers, err := c.openNodes(openNode)
	if err != nil {
		return nil, nil, err
	}
	l, err := redlock.New(nodes, opts...)
	if err != nil {
		closeAll(closers)
		return nil, nil, err
	}
	return l, &Clients{cfg: c, nodes: parsed, closers: closers}, nil
}

// kindURL is a node URL of a kind go-redis parses from a redis:// URL of
// its own (redis+cluster:// for ParseClusterURL, redis+sentinel:// for
// ParseFailoverURL), checked by parseKindURL.
type kindURL struct {
	raw, masked string
	scheme      string   // the URL's own scheme: redis+cluster, rediss+sentinel, ...
	u           *url.URL // the URL with go-redis's scheme, redis or rediss
}

// errorf is an error about the URL, quoted with its user info masked.
func (k *kindURL) errorf(format string, args ...any) error {
	return fmt.Errorf("%q: "+format, append([]any{k.masked}, args...)...)
}

// quote quotes a piece of the URL, but only when the URL has no user
// info: in a malformed one, a password may have landed in the path, a
// host or the query.
func (k *kindURL) quote(piece string) string {
	if k.masked != k.raw {
		return "(not shown: the URL has user info)"
	}
	return strconv.Quote(piece)
}

// goRedisError is an error of go-redis's parser, with any user info in
// its text masked.
func (k *kindURL) goRedisError(err error) error {
	return k.errorf("%v", redact.URLs(err.Error()))
}

// parseKindURL parses u when its scheme is "redis+"+kind or
// "rediss+"+kind (TLS): ok is false, with no error, for any other scheme.
// It swaps the scheme for go-redis's redis or rediss, checks the URL's
// host and every addr query parameter (host:port, a port from 1 to
// 65535), and gives the URL's host defaultPort when it has none. The
// errors quote the URL with its user info masked, and nothing of the
// user info.
func parseKindURL(u, kind, defaultPort string) (k *kindURL, ok bool, err error) {
	scheme, rest, _ := strings.Cut(u, "://")
	base, _ := strings.CutSuffix(scheme, "+"+kind)
	if base != "redis" && base != "rediss" || base == scheme {
		return nil, false, nil
	}
	k = &kindURL{raw: u, masked: redact.Value(u), scheme: scheme}
	k.u, err = url.Parse(base + "://" + rest)
	if err != nil {
		// url.Parse quotes the URL: say nothing of it but the masked text,
		// or its reason when the URL has no user info.
		if ue := (*url.Error)(nil); k.masked == k.raw && errors.As(err, &ue) {
			return nil, true, k.errorf("malformed URL: %v", ue.Err)
		}
		return nil, true, k.errorf("malformed URL (write a password's special characters as %%XX escapes)")
	}
	if k.u.Host == "" {
		return nil, true, k.errorf("no host: want %s://host:port[?addr=host:port...]", scheme)
	}
	if k.u.Port() == "" && !strings.HasSuffix(k.u.Host, ":") {
		k.u.Host = net.JoinHostPort(k.u.Hostname(), defaultPort)
	}
	for _, a := range append([]string{k.u.Host}, k.u.Query()["addr"]...) {
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, true, k.errorf("bad address %s: want host:port with a port from 1 to 65535", k.quote(a))
		}
		if strings.ContainsAny(host, ", \t") {
			return nil, true, k.errorf("bad address %s: list further hosts as addr query parameters, not with commas", k.quote(a))
		}
	}
	return k, true, nil
}

// clusterOptions parses a redis+cluster:// (or rediss+cluster://) URL, a
// Redis Cluster as one node: the URL's host and every addr query
// parameter are seed addresses, and the other query parameters go-redis
// ParseClusterURL options. cluster is false for any other scheme, which
// the caller parses as a redis:// URL. Errors quote the URL with its
// user info masked.
func clusterOptions(u string) (o *redis.ClusterOptions, cluster bool, err error) {
	k, cluster, err := parseKindURL(u, "cluster", "6379")
	if !cluster || err != nil {
		return nil, cluster, err
	}
	if p := strings.TrimPrefix(k.u.Path, "/"); p != "" && p != "0" {
		return nil, true, k.errorf("database %s: a Redis Cluster has database 0 only", k.quote(p))
	}
	o, err = redis.ParseClusterURL(k.u.String())
	if err != nil {
		return nil, true, k.goRedisError(err)
	}
	return o, true, nil
}

// Open is Load and Config.Open in one call, reading the process
// environment and then, for variables it does not set, the given .env
// files (see Lookup).
func Open(dotenv ...string) (*redlock.Redlock, *Clients, error) {
	lookup, err := Lookup(dotenv...)
	if err != nil {
		return nil, nil, err
	}
	c, err := Load(lookup)
	if err != nil {
		return nil, nil, err
	}
	return c.Open()
}
