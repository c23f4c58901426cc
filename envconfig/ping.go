package envconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/redlock/internal/redact"
	"github.com/redis/go-redis/v9"
)

// The causes a PingError names, the first words of its message.
const (
	// CauseRefused: nothing listens at the node's address.
	CauseRefused = "connection refused"
	// CauseTimeout: the node did not answer within the context's deadline
	// or the URL's dial_timeout or read_timeout.
	CauseTimeout = "timed out"
	// CauseTLS: a rediss:// node's TLS handshake failed; most often the
	// server does not speak TLS at that port (use redis://), or its
	// certificate is not trusted.
	CauseTLS = "TLS handshake failed (does the server speak TLS?)"
	// CauseAuth: the server refused the URL's user name or password, or
	// requires a password the URL does not give.
	CauseAuth = "authentication failed"
	// CauseHost: the node's host name does not resolve.
	CauseHost = "host not found"
	// CauseClosed: the server closed the connection without an answer;
	// a server that requires TLS does that to a redis:// URL (use
	// rediss://).
	CauseClosed = "connection closed by the server (does it require TLS?)"
	// CauseOther: any other failure; the error says what.
	CauseOther = "no answer"
)

// PingError is a node that did not answer Clients.Ping: which node, what
// went wrong in a few words (one of the Cause constants), and the client's
// error. Its text never shows a password:
//
//	envconfig: node "redis://xxxxx@10.0.0.1:6379": authentication failed: WRONGPASS invalid username-password pair or user is disabled.
type PingError struct {
	Node  string // the node's URL, secrets masked
	Cause string // CauseRefused, CauseTimeout, CauseTLS, CauseAuth, ...
	Err   error  // the client's error
}

func (e *PingError) Error() string {
	return fmt.Sprintf("envconfig: node %q: %s: %s", e.Node, e.Cause, redact.URLs(fmt.Sprint(e.Err)))
}

// Unwrap returns the client's error.
func (e *PingError) Unwrap() error { return e.Err }

// Ping checks that every node answers, so that a deployment can fail at
// start rather than at its first lock. It connects to each node, all at
// once, as its URL says (address, TLS, user and password, database, and
// for a redis+cluster:// node every master, for a redis+sentinel:// node
// the master the sentinels name), and sends PING, on connections of its
// own that it closes before it returns. For a TLS node (rediss://...) it
// first sends a plain-text PING to its first address: a server that
// answers it does not speak TLS there, which is CauseTLS at once rather
// than a handshake waiting out the deadline. It waits at most until ctx
// ends, and within the URL's dial_timeout and read_timeout (go-redis's
// defaults, 5 s and 3 s, when the URL does not set them).
//
// It returns nil when every node answered, and otherwise the *PingError
// of each node that did not, in the order of Config.Nodes, joined
// (errors.Join): a Redlock whose quorum still answers fails Ping too,
// since a node down is worth knowing at start. The nodes are checked with
// go-redis whatever Config.Client says, the URL syntax being go-redis's.
// Disabled Clients, which have no node, and nil Clients return nil.
func (c *Clients) Ping(ctx context.Context) error {
	if c == nil || len(c.nodes) == 0 {
		return nil
	}
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			if err := pingNode(ctx, n); err != nil {
				errs[i] = &PingError{Node: n.URL, Cause: pingCause(err), Err: err}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// errPlainText is the error of a rediss:// node whose server answers a
// plain-text PING: it does not speak TLS at that port.
var errPlainText = errors.New("the server answers without TLS at that address: use redis://, or the server's TLS port")

// pingNode connects to n with a go-redis client of its own, made from n's
// options with a dialer that honours ctx through the TLS handshake and
// marks a failed handshake (tlsError), one dial attempt and no retry. The
// pool keeps its default size: a pool whose every slot failed to dial
// starts a goroutine that redials every second until the pool is closed,
// outliving Ping by up to a second.
//
// A TLS handshake with a server that does not speak TLS mostly hangs
// until the deadline (Redis waits for the rest of a command that never
// comes). So for a TLS node, whose first address answering a plain-text
// PING in Redis's protocol settles it, that is tried first.
func pingNode(ctx context.Context, n Node) error {
	if network, addr, tls := firstAddr(n); tls && answersPlainText(ctx, network, addr) {
		return &tlsError{errPlainText}
	}
	switch {
	case n.Sentinel != nil:
		o := *n.Sentinel
		o.Dialer = probeDialer(o.TLSConfig, o.DialTimeout)
		o.DialerRetries, o.MaxRetries, o.MinIdleConns = 1, -1, 0
		o.ContextTimeoutEnabled = true
		c := redis.NewFailoverClient(&o)
		defer c.Close()
		return c.Ping(ctx).Err()
	case n.Cluster != nil:
		o := *n.Cluster
		o.Dialer = probeDialer(o.TLSConfig, o.DialTimeout)
		o.DialerRetries, o.MaxRetries, o.MinIdleConns = 1, -1, 0
		o.ContextTimeoutEnabled = true
		c := redis.NewClusterClient(&o)
		defer c.Close()
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.Ping(ctx).Err()
		})
	default:
		o := *n.Standalone
		o.Dialer = probeDialer(o.TLSConfig, o.DialTimeout)
		o.DialerRetries, o.MaxRetries, o.MinIdleConns = 1, -1, 0
		o.ContextTimeoutEnabled = true
		c := redis.NewClient(&o)
		defer c.Close()
		return c.Ping(ctx).Err()
	}
}

// firstAddr is the first address n's client dials (the node's, the first
// seed's or the first sentinel's), and whether it dials it with TLS.
func firstAddr(n Node) (network, addr string, tls bool) {
	switch {
	case n.Sentinel != nil:
		return "tcp", n.Sentinel.SentinelAddrs[0], n.Sentinel.TLSConfig != nil
	case n.Cluster != nil:
		return "tcp", n.Cluster.Addrs[0], n.Cluster.TLSConfig != nil
	default:
		return n.Standalone.Network, n.Standalone.Addr, n.Standalone.TLSConfig != nil
	}
}

// answersPlainText reports whether the server at addr answers a
// plain-text PING with a reply of Redis's protocol (+PONG, or an error
// such as -NOAUTH) within a second, or within ctx. A TLS server answers
// no such thing.
func answersPlainText(ctx context.Context, network, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}

// tlsError is a TLS handshake that failed.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "TLS handshake: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// probeDialer dials as go-redis's own dialer does, but bounds the TLS
// handshake by the context too (go-redis's bounds it by the dial timeout
// only) and marks its failure, since a handshake with a server that does
// not speak TLS ends in nothing more telling than a timeout.
func probeDialer(conf *tls.Config, timeout time.Duration) func(context.Context, string, string) (net.Conn, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second // go-redis's default
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		d := net.Dialer{}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil || conf == nil {
			return conn, err
		}
		conf := conf.Clone()
		if conf.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				conf.ServerName = host
			}
		}
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, &tlsError{err}
		}
		return tc, nil
	}
}

// pingCause names what err, a failed ping, means for an operator.
func pingCause(err error) string {
	var (
		te  *tlsError
		dns *net.DNSError
		ne  net.Error
	)
	switch {
	case errors.As(err, &te):
		return CauseTLS
	case errors.Is(err, syscall.ECONNREFUSED):
		return CauseRefused
	case errors.As(err, &dns):
		return CauseHost
	case authFailed(err):
		return CauseAuth
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout():
		return CauseTimeout
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return CauseClosed
	default:
		return CauseOther
	}
}

// authFailed reports whether err is the server's refusal of the
// credentials (or of a command for want of them).
func authFailed(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, prefix := range []string{"WRONGPASS", "NOAUTH", "ERR AUTH", "ERR invalid password", "ERR invalid username-password", "ERR Client sent AUTH"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}
