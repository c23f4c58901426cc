package rueidisnode

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Two goroutines of a rueidis cluster client that its Close does not
	// end, rueidis's own and bounded, not the adapter's: the one that
	// closes the connections a topology refresh dropped, after sleeping
	// five seconds, and the one that starts a refresh after an error,
	// after sleeping up to a second.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
}

const watchdog = testwait.Watchdog

// clientOption is the options of the tests' rueidis clients, for the
// nodes at addrs (one server, a cluster's seeds, or sentinels): as the
// package documentation asks (ConnLifetime left at zero), client-side
// caching off (miniredis has no CLIENT TRACKING), a bounded dial, and
// rueidis's retries left on: the adapter must not need them off. change,
// when given, adjusts them; Guard, as the package documentation asks,
// comes last.
func clientOption(addrs []string, change ...func(*rueidis.ClientOption)) rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress:  addrs,
		DisableCache: true,
		Dialer:       net.Dialer{Timeout: time.Second},
	}
	for _, f := range change {
		f(&opt)
	}
	return Guard(opt)
}

// newClient makes a client with opt, closed when the test ends.
func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// client is newClient for the one server at addr.
func client(t testing.TB, addr string, change ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, clientOption([]string{addr}, change...))
}

// single makes a client for one node without asking the node whether it
// is a cluster: miniredis answers CLUSTER SLOTS as a one-node cluster, and
// rueidis would make a cluster client of it.
func single(o *rueidis.ClientOption) { o.ForceSingleClient = true }

// resp2 makes a client speak RESP2, as it does with Redis before 6.
func resp2(o *rueidis.ClientOption) { o.AlwaysRESP2 = true }

// adapt is New for a client the test knows to be valid.
func adapt(t testing.TB, c rueidis.Client, opts ...Option) *Node {
	t.Helper()
	n, err := New(c, opts...)
	require.NoError(t, err)
	return n
}

// described is New over a fresh client made with opt, told its options
// (WithClientOption), as cluster and sentinel clients need.
func described(t testing.TB, opt rueidis.ClientOption, opts ...Option) *Node {
	t.Helper()
	return adapt(t, newClient(t, opt), append([]Option{WithClientOption(opt)}, opts...)...)
}

// serverNode is a node of the one server at addr.
func serverNode(t testing.TB, addr string, change ...func(*rueidis.ClientOption)) *Node {
	t.Helper()
	return adapt(t, client(t, addr, change...))
}

// goredisNode is the go-redis adapter's node of c, closed when the test
// ends (which ends its lingering subscriptions).
func goredisNode(t testing.TB, c redis.UniversalClient, opts ...goredis.Option) *goredis.Node {
	t.Helper()
	n, err := goredis.New(c, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// single locker over n, with opts.
func newSingle(t testing.TB, n driver.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	r, err := redlock.NewSingle(n, opts...)
	require.NoError(t, err)
	return r
}

func newRedlock(t testing.TB, nodes []driver.Node, opts ...redlock.Option) *redlock.Redlock {
	t.Helper()
	r, err := redlock.New(nodes, opts...)
	require.NoError(t, err)
	return r
}

// realNodes starts n redis-server processes and returns a node of each.
func realNodes(t *testing.T, n int) []driver.Node {
	t.Helper()
	nodes := make([]driver.Node, n)
	for i, addr := range redistest.Start(t, n).Addrs() {
		nodes[i] = serverNode(t, addr)
	}
	return nodes
}

// fresh returns a key of its own for a test, without a hash tag.
func fresh(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + ":" + hex.EncodeToString(b[:])
}

// contention counts a locker's refused attempts.
func contention() (redlock.Option, *atomic.Int64) {
	var refused atomic.Int64
	return redlock.WithObserver(func(e redlock.Event) {
		if e.Kind == redlock.EventContention {
			refused.Add(1)
		}
	}), &refused
}

// handedOff checks that a waiter on key whose next attempt is an hour
// away gets the lock once holder releases it: only a release announcement
// can wake it before the watchdog. It has two retries, since the attempt
// it makes once subscribed may count as one (TestLastRetryIsNotSleptOut).
// refused counts the waiter's refused attempts; subscribed, when set, is
// checked while the waiter waits.
func handedOff(t *testing.T, holderLk, waiterLk redlock.Locker, refused *atomic.Int64, key string, subscribed func()) {
	t.Helper()
	holder, err := holderLk.Lock(t.Context(), key)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	before := refused.Load()
	got := make(chan error, 1)
	go func() {
		l, err := waiterLk.Lock(ctx, key, redlock.WithStrategy(redlock.Retry(2, time.Hour)))
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	// The first attempt, and the one made once subscribed.
	testwait.Until(t, "two refused attempts", func() bool { return refused.Load() >= before+2 })
	if subscribed != nil {
		subscribed()
	}
	require.NoError(t, holder.Unlock(t.Context()))
	require.NoError(t, <-got, "the waiter was woken by the release, not by its hour-long delay")
}

// replyLoser is a rueidis DialCtxFn whose connections lose one reply on
// demand: after arm(n), the n-th chunk read from the server from then on
// (one per reply when one command is in flight) arrives, so its command
// ran, and is thrown away, and the connection breaks. Unlike the fault
// proxy's LoseReply, which loses every reply while it is on, it loses
// exactly one: a locker's rollback, sent at once after, gets through.
// With only set, it counts only the chunks of connections whose latest
// write held only (a cluster client's other connections read replies of
// their own: a topology refresh, another master's handshake).
type replyLoser struct {
	left atomic.Int64
	only string
}

// arm warms n's client (made with quiet), then arms the loser.
func (d *replyLoser) arm(t *testing.T, n *Node, left int64) {
	t.Helper()
	warm(t, n)
	d.left.Store(left)
}

// quiet makes a client whose next reply read is always a command's: one
// pipelined connection (by default rueidis spreads commands over several,
// dialled lazily, and the reply lost would be a new connection's
// handshake), and no PING of idle connections, whose reply would be lost
// when the test is slow.
func quiet(o *rueidis.ClientOption) {
	o.PipelineMultiplex = -1
	o.Dialer.KeepAlive = -1
}

// warm makes sure n's client has its connection: rueidis dials again
// lazily after a connection broke, and the next reply read must be a
// command's, not the handshake's.
func warm(t *testing.T, n *Node) {
	t.Helper()
	require.NoError(t, n.c.Do(t.Context(), n.c.B().Ping().Build()).Error())
}

func (d *replyLoser) dial(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, d: d}, nil
}

// option is the loser as a client option.
func (d *replyLoser) option(o *rueidis.ClientOption) { o.DialCtxFn = d.dial }

type losingConn struct {
	net.Conn
	d       *replyLoser
	counted atomic.Bool // the latest write held d.only, or d.only is ""
}

func (c *losingConn) Write(p []byte) (int, error) {
	c.counted.Store(c.d.only == "" || strings.Contains(strings.ToUpper(string(p)), c.d.only))
	return c.Conn.Write(p)
}

func (c *losingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && (c.d.only == "" || c.counted.Load()) && c.d.left.Load() > 0 && c.d.left.Add(-1) == 0 {
		_ = c.Conn.Close() // the reply arrived: the command ran
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}
