package badnode

import (
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/locktest"
	"github.com/stretchr/testify/require"
)

// The per-node timeouts of the lockers over a bad node: short, since a
// silent node costs one on every round. Over a Single, only the bad node
// answers late; over a Redlock, the two healthy nodes must answer within
// it while seven other rows run, under the race detector, on two cores.
const (
	singleNodeTimeout = 150 * time.Millisecond
	quorumNodeTimeout = 400 * time.Millisecond
)

// Bound bounds one primitive's calls over a bad node.
const Bound = 10 * time.Second

// RunRows runs every primitive (locktest.Primitives) over a server of
// every shape, through the adapter that connect makes a node of an
// address with: over a Single of the bad node, each must fail within
// Bound; over a Redlock of it and two miniredis, each must succeed; each
// must reach the bad node. A shape in skip is skipped with its reason.
// The rows mostly wait out node timeouts, so eight run at a time (where
// t.Parallel would run GOMAXPROCS of them, and all at once would miss the
// node timeout on a loaded machine).
func RunRows(t *testing.T, connect func(t *testing.T, addr string) driver.Node, skip map[Shape]string) {
	runRows(t, Start, connect, skip)
}

// RunRudeRows is RunRows over servers that answer the handshake with
// their shape too (StartRude): a client that never gets a sound
// connection. connect must not fail when the handshake does.
func RunRudeRows(t *testing.T, connect func(t *testing.T, addr string) driver.Node, skip map[Shape]string) {
	runRows(t, StartRude, connect, skip)
}

func runRows(t *testing.T, start func(testing.TB, Shape) *Server, connect func(t *testing.T, addr string) driver.Node, skip map[Shape]string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, 8)
	for _, shape := range Shapes() {
		for _, quorum := range []bool{false, true} {
			name := shape.String() + "/Single"
			if quorum {
				name = shape.String() + "/Redlock"
			}
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				t.Run(name, func(t *testing.T) {
					if why, ok := skip[shape]; ok {
						t.Skip(why)
					}
					rows(t, start(t, shape), quorum, connect)
				})
			})
		}
	}
}

// rows runs every primitive over the bad node, alone or with two
// miniredis (quorum).
func rows(t *testing.T, bad *Server, quorum bool, connect func(t *testing.T, addr string) driver.Node) {
	addrs := []string{bad.Addr()}
	if quorum {
		addrs = append(addrs, miniredis.RunT(t).Addr(), miniredis.RunT(t).Addr())
	}
	nodes := make([]driver.Node, len(addrs))
	for i, addr := range addrs {
		nodes[i] = connect(t, addr)
	}
	timeout := singleNodeTimeout
	if quorum {
		timeout = quorumNodeTimeout
	}
	r, err := redlock.New(nodes, redlock.WithNodeTimeout(timeout), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	// Patience for the waiting primitives: rounds enough for a lock, its
	// release and a wait for it.
	ctx := locktest.WithPatience(t.Context(), 8*timeout)
	for _, op := range locktest.Primitives {
		before := bad.Commands()
		err := bounded(t, op.Name, func() error { return op.Use(ctx, r, "bad:"+op.Name) })
		if quorum {
			require.NoError(t, err, "%s with one bad node of three", op.Name)
		} else {
			require.Error(t, err, "%s over a bad node alone", op.Name)
		}
		require.Greater(t, bad.Commands(), before, "%s reached the bad node", op.Name)
	}
}

// bounded runs f, failing t if it takes longer than Bound.
func bounded(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(Bound):
		t.Fatalf("%s did not return within %v", what, Bound)
		return nil
	}
}
