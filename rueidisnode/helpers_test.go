package rueidisnode

import (
	"net"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/rueidis"
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

// client returns a rueidis client for the one node at addr, as this
// package's documentation asks for it (ConnLifetime left at zero), with
// client-side caching off (miniredis has no CLIENT TRACKING, and the
// lockers read nothing) and a bounded dial. rueidis's retries are left
// on: the adapter must not need them off. It is closed when the test
// ends. change, when given, adjusts the options.
func client(t testing.TB, addr string, change ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	return newClient(t, clientOption([]string{addr}, change...))
}

// clientOption is the options of client, for the nodes at addrs (a
// cluster's seeds, or sentinels).
func clientOption(addrs []string, change ...func(*rueidis.ClientOption)) rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress:  addrs,
		DisableCache: true,
		Dialer:       net.Dialer{Timeout: time.Second},
	}
	for _, f := range change {
		f(&opt)
	}
	return opt
}

// newClient makes a client with opt, closed when the test ends.
func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// described is New over a fresh client made with opt, told its options
// (WithClientOption), as cluster and sentinel clients need.
func described(t testing.TB, opt rueidis.ClientOption) redlock.Backend {
	t.Helper()
	b, err := New(newClient(t, opt), WithClientOption(opt))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// adapt is New for a client the test knows to be valid, as the concrete
// type, for tests that look inside the adapter.
func adapt(t testing.TB, c rueidis.Client) *node {
	t.Helper()
	b, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return b.(*node)
}

// single makes a client for one node without asking the node whether it
// is a cluster: miniredis answers CLUSTER SLOTS as a one-node cluster, and
// rueidis would make a cluster client of it.
func single(o *rueidis.ClientOption) { o.ForceSingleClient = true }
