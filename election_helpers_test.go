package redlock_test

import (
	"context"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"io"
	"slices"
	"sync"
	"testing"

	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// electionKinds are the node sets the election tests run on: miniredis
// (its clock moves only by FastForward) and real redis-server processes.
var electionKinds = []string{"mini", "real"}

// servers are the nodes of a test: miniredis (its clock moves only by
// FastForward) or real redis-server processes.
type servers struct {
	bs    []driver.Node
	minis []*miniredis.Miniredis // for miniredis
	addrs []string               // for redis-server
}

// electionNodes starts n servers of a kind.
func electionNodes(t *testing.T, kind string, n int) servers {
	t.Helper()
	if kind == "real" {
		c, bs := realNodes(t, n)
		return servers{bs: bs, addrs: c.Addrs()}
	}
	ms, bs := minis(t, n)
	return servers{bs: bs, minis: ms}
}

// killable returns nodes on the same servers, and kill, after which a
// leader on those nodes can no longer renew its lease and the lease
// expires on the servers: the leader's process died. On miniredis kill
// moves the servers' clocks past every TTL; on redis-server it closes the
// nodes' clients, and the lease expires after its TTL.
func (s servers) killable(t testing.TB) ([]driver.Node, func()) {
	t.Helper()
	if s.minis != nil {
		bs := make([]driver.Node, len(s.minis))
		for i, m := range s.minis {
			bs[i] = node(t, redistest.Client(t, m.Addr()))
		}
		return bs, func() {
			for _, m := range s.minis {
				m.FastForward(time.Hour)
			}
		}
	}
	bs := make([]driver.Node, len(s.addrs))
	cs := make([]*redis.Client, len(s.addrs))
	for i, addr := range s.addrs {
		cs[i] = redistest.Client(t, addr)
		bs[i] = node(t, cs[i])
	}
	return bs, func() {
		// A process that dies closes every socket it has: the clients'
		// and the connections the nodes opened themselves.
		for i, c := range cs {
			_ = c.Close()
			if cl, ok := bs[i].(io.Closer); ok {
				_ = cl.Close()
			}
		}
	}
}

// newElection builds an election named name on its own locker over bs:
// one locker per campaigner stands for one process.
func newElection(t *testing.T, bs []driver.Node, name string, opts ...redlock.Option) *redlock.Election {
	t.Helper()
	e, err := redlock.NewElection(lockerFor(t, bs), name, opts...)
	require.NoError(t, err)
	return e
}

// leaderEvents collects what Observe sends, until the test ends.
type leaderEvents struct {
	mu     sync.Mutex
	events []redlock.Leader
	done   chan struct{} // closed when Observe's channel closed
}

// observe starts Observe on e for the rest of the test; cleanup cancels it
// and waits for its channel to close.
func observe(t *testing.T, e *redlock.Election) *leaderEvents {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := e.Observe(ctx)
	require.NoError(t, err)
	ev := &leaderEvents{done: make(chan struct{})}
	go func() {
		defer close(ev.done)
		for l := range ch {
			ev.mu.Lock()
			ev.events = append(ev.events, l)
			ev.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-ev.done
	})
	return ev
}

func (ev *leaderEvents) all() []redlock.Leader {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return slices.Clone(ev.events)
}

// waitFor waits until the last event is want.
func (ev *leaderEvents) waitFor(t *testing.T, want redlock.Leader) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("Observe reporting %+v", want), func() bool {
		all := ev.all()
		return len(all) > 0 && all[len(all)-1] == want
	})
}

// checkOrder fails t unless consecutive events differ and the terms of
// the leaders reported strictly increase.
func checkOrder(t *testing.T, events []redlock.Leader) {
	t.Helper()
	var last int64
	for i, l := range events {
		if i > 0 && l == events[i-1] {
			t.Errorf("event %d repeats %+v: %v", i, l, events)
		}
		if l == (redlock.Leader{}) {
			continue
		}
		if l.Term <= last {
			t.Errorf("event %d: term %d after term %d, want strictly increasing: %v", i, l.Term, last, events)
		}
		last = l.Term
	}
}

// checkOrderLate is checkOrder for a network that delivers commands
// late: a campaign whose acquisition reached a node after its release
// there can hold the key on a quorum again after it resigned, until its
// TTL (see Observe), so the same leadership, with the same term, may be
// reported again after a "no leader". Anything else is as checkOrder:
// consecutive events differ, and a leader other than the last one seen
// has a strictly greater term.
func checkOrderLate(t *testing.T, events []redlock.Leader) {
	t.Helper()
	var last redlock.Leader
	for i, l := range events {
		if i > 0 && l == events[i-1] {
			t.Errorf("event %d repeats %+v: %v", i, l, events)
		}
		if l == (redlock.Leader{}) || l == last {
			continue
		}
		if l.Term <= last.Term {
			t.Errorf("event %d: %+v after %+v, want a strictly greater term: %v", i, l, last, events)
		}
		last = l
	}
}

// leaders returns the events that name a leader, in order, each
// leader once with the last term reported for it: a read during a
// winner's fencing round may report it with a lower term first (see
// Election.Leader), which checkOrder checks separately.
func leaders(events []redlock.Leader) []redlock.Leader {
	var out []redlock.Leader
	for _, l := range events {
		switch {
		case l == redlock.Leader{}:
		case len(out) > 0 && out[len(out)-1].Value == l.Value:
			out[len(out)-1] = l
		default:
			out = append(out, l)
		}
	}
	return out
}
