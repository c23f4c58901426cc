package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/redis/go-redis/v9"
)

const demoUsage = `usage: redlock demo [--addrs host:port,...]

Plays a scenario: three workers update supplier abc under its lock, taking
turns, while a fourth updates supplier xyz beside them; then two of the
five masters stop and the workers go on; a third stops, and Lock reports
that no quorum can be reached; the masters restart and the workers go on
again. It prints each acquisition and a summary, and counts violations:
two workers inside one record at once.

Masters: five in-process miniredis nodes, or your servers with --addrs
(host:port only; the stops are then simulated, the servers keep running).
`

// demo plays the seed's scenario: workers updating supplier "abc" take turns,
// a worker on "xyz" runs beside them; then masters fail one by one.
func demo(args []string) int {
	fs := newFlags("demo", demoUsage, os.Stdout, os.Stderr)
	var addrs string
	fs.StringVar(&addrs, "addrs", "", "comma-separated host:port of real Redis masters (default: five in-process nodes)")
	if status, ok := fs.parse(args); !ok {
		return status
	}
	if fs.NArg() > 0 {
		return fs.usage("unexpected argument %q", fs.Arg(0))
	}
	if addrs != "" {
		if _, err := parseAddrs(addrs); err != nil {
			return fs.usage("%v", err)
		}
	}
	cl, err := newDemoCluster(addrs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock demo:", err)
		return exitFailure
	}
	defer cl.close()
	nodes, err := cl.backends()
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock demo:", err)
		return exitFailure
	}
	locker, err := redlock.New(nodes, redlock.WithTTL(2*time.Second),
		redlock.WithNodeTimeout(100*time.Millisecond), redlock.WithStrategy(redlock.Retry(6, 20*time.Millisecond)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "redlock demo:", err)
		return exitFailure
	}
	fmt.Printf("%d masters (%s), quorum %d\n", len(cl.nodes), cl.kind, len(cl.nodes)/2+1)

	var st stats
	fmt.Println("\n1. three workers update supplier abc, one updates supplier xyz")
	st.workers(locker, map[string]int{"supplier:abc": 3, "supplier:xyz": 1})

	fmt.Println("\n2. two masters stopped")
	cl.stop(0)
	cl.stop(1)
	st.workers(locker, map[string]int{"supplier:abc": 2})

	fmt.Println("\n3. a third master stopped: no quorum can be reached")
	cl.stop(2)
	_, err = locker.Lock(context.Background(), "supplier:abc", redlock.WithStrategy(redlock.Reject()))
	fmt.Printf("   Lock: %v\n   errors.Is(err, ErrUnavailable) = %v\n", err, errors.Is(err, redlock.ErrUnavailable))
	if !errors.Is(err, redlock.ErrUnavailable) {
		st.violations.Add(1)
	}

	fmt.Println("\n4. masters restarted")
	for i := range 3 {
		if err := cl.start(i); err != nil {
			fmt.Fprintln(os.Stderr, "redlock demo:", err)
			return exitFailure
		}
	}
	st.workers(locker, map[string]int{"supplier:abc": 2, "supplier:xyz": 1})

	fmt.Printf("\nsummary: %d acquisitions, %d conflicts (attempts that found the record busy and waited), %d gave up, %d violations\n",
		st.acquired.Load(), st.conflicts.Load(), st.gaveUp.Load(), st.violations.Load())
	if st.violations.Load() != 0 {
		return exitFailure
	}
	return exitOK
}

type stats struct {
	acquired, conflicts, gaveUp, violations atomic.Int64
}

// workers runs n workers per record, each updating its record three times
// under the lock, and checks that no two were inside one record at once.
func (st *stats) workers(locker redlock.Locker, perRecord map[string]int) {
	var wg sync.WaitGroup
	inside := map[string]*atomic.Int32{}
	for rec := range perRecord {
		inside[rec] = new(atomic.Int32)
	}
	id := 0
	for rec, n := range perRecord {
		for range n {
			id++
			name := fmt.Sprintf("worker-%d", id)
			wg.Go(func() {
				for range 3 {
					st.update(locker, name, rec, inside[rec])
				}
			})
		}
	}
	wg.Wait()
}

func (st *stats) update(locker redlock.Locker, worker, rec string, inside *atomic.Int32) {
	start := time.Now()
	waited := redlock.Retry(6, 20*time.Millisecond)
	lock, err := locker.Lock(context.Background(), rec, redlock.WithStrategy(countingStrategy{waited, &st.conflicts}))
	if err != nil {
		st.gaveUp.Add(1)
		fmt.Printf("   %-9s %-13s gave up: %v\n", worker, rec, err)
		return
	}
	if inside.Add(1) != 1 {
		st.violations.Add(1)
	}
	st.acquired.Add(1)
	fmt.Printf("   %-9s %-13s locked after %3dms, updating\n", worker, rec, time.Since(start).Milliseconds())
	time.Sleep(30 * time.Millisecond) // the UPDATE
	inside.Add(-1)
	if err := lock.Unlock(context.Background()); err != nil {
		fmt.Printf("   %-9s %-13s unlock: %v\n", worker, rec, err)
	}
}

// countingStrategy counts how often a worker found the record busy.
type countingStrategy struct {
	redlock.Strategy
	n *atomic.Int64
}

func (c countingStrategy) Backoff(retry int) (time.Duration, bool) {
	c.n.Add(1)
	return c.Strategy.Backoff(retry)
}

// demoCluster is the demo's masters: in-process nodes it can really stop
// and restart, or the user's servers, whose loss it simulates.
type demoCluster struct {
	kind  string
	nodes []*demoNode
}

type demoNode struct {
	mini    *miniredis.Miniredis // nil for a real server
	addr    string
	client  *redis.Client
	stopped atomic.Bool
}

func newDemoCluster(addrs string) (*demoCluster, error) {
	cl := &demoCluster{kind: "in-process miniredis"}
	if addrs == "" {
		for range 5 {
			m := miniredis.NewMiniRedis()
			if err := m.Start(); err != nil {
				cl.close()
				return nil, err
			}
			cl.nodes = append(cl.nodes, &demoNode{mini: m, addr: m.Addr()})
		}
	} else {
		cl.kind = "real servers; stops are simulated"
		list, err := parseAddrs(addrs)
		if err != nil {
			return nil, err
		}
		for _, a := range list {
			cl.nodes = append(cl.nodes, &demoNode{addr: a})
		}
	}
	for _, n := range cl.nodes {
		n.client = redis.NewClient(&redis.Options{Addr: n.addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	}
	for _, n := range cl.nodes {
		if err := n.client.Ping(context.Background()).Err(); err != nil {
			cl.close()
			return nil, fmt.Errorf("master %s: %w", n.addr, err)
		}
	}
	return cl, nil
}

func (cl *demoCluster) backends() ([]driver.Node, error) {
	bs := make([]driver.Node, len(cl.nodes))
	for i, n := range cl.nodes {
		b, err := goredis.New(n.client)
		if err != nil {
			return nil, err
		}
		bs[i] = &stoppable{Node: b, node: n}
	}
	return bs, nil
}

func (cl *demoCluster) stop(i int) {
	n := cl.nodes[i]
	n.stopped.Store(true)
	if n.mini != nil {
		n.mini.Close()
	}
	fmt.Printf("   stopped master %s\n", n.addr)
}

func (cl *demoCluster) start(i int) error {
	n := cl.nodes[i]
	if n.mini != nil {
		if err := n.mini.Restart(); err != nil {
			return err
		}
	}
	n.stopped.Store(false)
	fmt.Printf("   restarted master %s\n", n.addr)
	return nil
}

func (cl *demoCluster) close() {
	for _, n := range cl.nodes {
		if n.client != nil {
			n.client.Close()
		}
		if n.mini != nil {
			n.mini.Close()
		}
	}
}

// stoppable fails every call while its node is stopped, which for a real
// server simulates losing it.
type stoppable struct {
	driver.Node
	node *demoNode
}

var errStopped = errors.New("master stopped")

func (s *stoppable) Eval(ctx context.Context, script *driver.Script, keys []string, args ...string) (any, error) {
	if s.node.stopped.Load() {
		return nil, errStopped
	}
	return s.Node.Eval(ctx, script, keys, args...)
}
