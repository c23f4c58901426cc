package goredis

import (
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fair release whose queue's head is a waiter of the releasing Lock's
// own locker hands it the key in the script's reply: the
// nodes publish nothing, and the waiter takes the granted lock without an
// attempt of its own. A waiter of another locker (another process) is
// announced its grant, as before.
func TestFairGrantWithinTheLocker(t *testing.T) {
	srv := redistest.Start(t, 3)
	direct := make([]*redis.Client, len(srv.Servers))
	for i, s := range srv.Servers {
		direct[i] = redistest.Client(t, s.Addr())
	}
	const key = "fair:within"
	// A locker of the test: its Redlock, its nodes, and contended, which
	// receives its EventContention for key: sent once an attempt's round
	// is over (its replies read and recorded), so a release after it
	// finds the waiter waiting, not in the middle of an attempt (a grant
	// during an attempt is taken over by another one).
	type testLocker struct {
		*redlock.Redlock
		nodes     []*Node
		contended chan struct{}
	}
	locker := func() *testLocker {
		tl := &testLocker{nodes: make([]*Node, len(srv.Servers)), contended: make(chan struct{}, 16)}
		observer := redlock.Observer(func(e redlock.Event) {
			if e.Kind == redlock.EventContention && e.Key == key {
				tl.contended <- struct{}{}
			}
		})
		nodes := make([]driver.Node, len(srv.Servers))
		for i, s := range srv.Servers {
			tl.nodes[i] = adapt(t, redistest.Client(t, s.Addr()))
			nodes[i] = tl.nodes[i]
		}
		// Delays far longer than the test: only the release can end the wait.
		var err error
		tl.Redlock, err = redlock.New(nodes, redlock.WithFairness(true), redlock.WithTTL(30*time.Second),
			redlock.WithStrategy(redlock.Retry(2, time.Minute)), redlock.WithObserver(observer))
		require.NoError(t, err)
		return tl
	}
	// counts returns what the nodes ran of cmd, summed.
	counts := func(cmd string) int {
		n := 0
		for _, c := range direct {
			n += redistest.Calls(t, c, cmd)
		}
		return n
	}
	scripts := func() int { return counts("eval") + counts("evalsha") } // the first on a connection is an EVAL
	// handOff locks key on holder, starts a Lock of key on waiter, waits
	// until that call made attempts attempts, each over (EventContention),
	// then unlocks and returns the waiter's lock, and the scripts and
	// PUBLISHes the nodes ran from the Unlock on.
	handOff := func(holder, waiter *testLocker, attempts int) (*redlock.Lock, int, int) {
		held, err := holder.Lock(t.Context(), key)
		require.NoError(t, err)
		seen := waiter.contended
		for len(seen) > 0 { // an earlier hand-off's
			<-seen
		}
		got := make(chan *redlock.Lock, 1)
		go func() {
			l, err := waiter.Lock(t.Context(), key)
			assert.NoError(t, err)
			got <- l
		}()
		for range attempts {
			testwait.Next(t, seen)
		}
		before, published := scripts(), counts("publish")
		require.NoError(t, held.Unlock(t.Context()))
		l := testwait.Next(t, got)
		require.NotNil(t, l)
		return l, scripts() - before, counts("publish") - published
	}
	// heldEverywhere asserts that every node holds l's token.
	heldEverywhere := func(l *redlock.Lock) {
		for _, c := range direct {
			v, err := c.Get(t.Context(), key).Result()
			require.NoError(t, err)
			assert.Equal(t, l.Token(), v, "every node holds the waiter's token")
		}
	}
	mine, theirs := locker(), locker()

	// A first contention: the waiting call records the key as contended
	// for its locker. (Its attempt after subscribing may meet the release
	// on some nodes and not on others; the lock it gets is valid on a
	// quorum, not necessarily on every node, so nothing is asserted here.)
	l, _, _ := handOff(mine, mine, 1)
	require.NoError(t, l.Unlock(t.Context()))
	// That Unlock's announcement reaches the locker's lingering
	// subscriptions when it will: one that came after the next waiter
	// joined would wake it to a needless attempt. Once the subscriptions
	// have ended (subscriptionLinger), nothing published before can reach
	// the next waiter's.
	testwait.Until(t, "the locker's subscriptions ended", func() bool {
		for _, n := range mine.nodes {
			if n.hub.core.Current() != nil {
				return false
			}
		}
		return true
	})

	// Contended. The locker's next fair call on the key, the holder's,
	// subscribes before its attempt (the waiter above found the key
	// taken) and takes that record with it (takeContended): the waiter
	// attempts, subscribes and attempts again. The release comes after
	// both attempts are over: one still under way would be counted with
	// it, and could take the grant over itself.
	l, ran, published := handOff(mine, mine, 2)
	heldEverywhere(l)
	assert.Equal(t, len(direct), ran, "the release, and no attempt of the waiter's")
	assert.Zero(t, published, "a grant within the locker is not announced")
	require.NoError(t, l.Unlock(t.Context()))

	// Another locker's waiter: queued, subscribed, queued again.
	l, ran, published = handOff(mine, theirs, 2)
	heldEverywhere(l)
	assert.Equal(t, len(direct), ran, "the release, and no attempt of the waiter's")
	assert.Equal(t, len(direct), published, "the grant announced on every node")
	require.NoError(t, l.Unlock(t.Context()))
}
