package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Backend is one independent Redis master. A Single locker uses one; a
// Redlock uses several that share nothing (no replication between them).
//
// Implementations must be safe for concurrent use and must honour the
// context's deadline on every call: the lockers bound each node call with
// a per-node timeout and rely on it to keep a dead or paused node from
// stalling an acquisition.
//
// An implementation must never send a command a second time after it may
// have reached the node (a client library's automatic retry after a broken
// connection): the second answer would describe the first one's effect.
// A resent Acquire would find our own key and answer "held", a resent
// Release would find it gone and answer "not ours". A call whose outcome
// is unknown returns an error; the lockers treat it as "may have
// happened" (an acquisition is rolled back there, a release or extension
// does not count toward the quorum).
type Backend interface {
	// Name identifies the node in errors and logs, usually its address.
	Name() string
	// Acquire sets key to token with the given TTL only if key does not
	// exist, atomically (SET key token NX PX ttl). It reports whether the
	// key was set.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// Release deletes key only if it holds token (release.lua). It reports
	// whether the key was deleted. When announce is true and the key was
	// deleted, it also publishes token on ReleaseChannel(key), in the same
	// atomic step, so that waiters (Notifier) retry at once; an
	// announcement that fails must not fail the release.
	Release(ctx context.Context, key, token string, announce bool) (bool, error)
	// Extend resets key's TTL only if it holds token (extend.lua). It
	// reports whether the key was extended; it never creates the key.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
}

// Fencer is the optional interface of a Backend that can issue fencing
// tokens (WithFencing). The go-redis adapter implements it; New,
// NewSingle and Lock refuse WithFencing over a node that does not, with
// ErrInvalid. The scheme that makes the tokens strictly increasing over N
// nodes is described in fence.go.
type Fencer interface {
	// AcquireFenced is Acquire that, only when it sets the key, also
	// increments the key's fence counter in the same atomic step and
	// returns its new value (≥ 1). The counter never expires.
	AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (ok bool, fence int64, err error)
	// RaiseFence sets the key's fence counter to at least fence, only
	// while key holds token, atomically. It reports whether key held
	// token (and so whether the counter is now at least fence).
	RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error)
}

var (
	//go:embed release.lua
	releaseSource string
	releaseScript = newScript(releaseSource)

	//go:embed extend.lua
	extendSource string
	extendScript = newScript(extendSource)
)

// NewBackend adapts a go-redis v9 client (a *redis.Client for one master;
// a cluster or ring client works if each lock key maps to one master) to a
// Backend named after its address, "host:port". Databases of one server
// are one node (they share the server's fate), so a Redlock refuses two of
// them as duplicates; the database still separates a process's lines of
// waiters (notify.go). It returns nil for a nil client, which New and
// NewSingle reject.
//
// The client must be created with ContextTimeoutEnabled: true; otherwise
// go-redis ignores context deadlines, a paused node would hold every call
// for the client's ReadTimeout, and New and NewSingle refuse the node.
//
// Commands are never resent: whatever the client's MaxRetries, every
// command the adapter sends is marked NoRetry (sendOnce), so a lost
// reply is an error, never a second execution's answer.
//
// Scripts run with EVALSHA and fall back to EVAL the first time a node
// does not know them (after a restart or SCRIPT FLUSH). Commands that
// concurrent callers send to one node go out together as one pipeline
// (pipeline.go); a caller alone sends at once.
func NewBackend(c redis.UniversalClient) Backend {
	if c == nil {
		return nil
	}
	return &goRedis{c: c, name: clientName(c), q: coalescer{c: c}}
}

type goRedis struct {
	c    redis.UniversalClient
	name string
	q    coalescer
	hub  hub // release notifications (hub.go)
}

// clientName names a node after its address.
func clientName(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return fmt.Sprintf("cluster%v", c.Options().Addrs)
	case *redis.Ring:
		return fmt.Sprintf("ring%v", c.Options().Addrs)
	}
	return fmt.Sprintf("%T", c)
}

// lineTag separates the lines of waiters of lockers on different databases
// of one server: their keys are different keys.
func (g *goRedis) lineTag() string {
	db := 0
	switch c := g.c.(type) {
	case *redis.Client:
		db = c.Options().DB
	case *redis.Ring:
		db = c.Options().DB
	}
	if db == 0 {
		return ""
	}
	return "db" + strconv.Itoa(db)
}

// contextTimeouts reports whether the client honours context deadlines.
func (g *goRedis) contextTimeouts() bool {
	switch c := g.c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true // unknown implementations are trusted, as documented on Backend
}

func (g *goRedis) Name() string { return g.name }

func (g *goRedis) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	// Always PX, even for whole seconds, so the TTL on the node is exactly
	// the one the validity was computed from.
	cmd := redis.NewBoolCmd(ctx, "set", key, token, "px", ttl.Milliseconds(), "nx")
	if err := g.q.process(ctx, sendOnce{cmd}); err != nil {
		return false, err // cmd may still be in flight: read nothing from it
	}
	return cmd.Val(), nil
}

func (g *goRedis) Release(ctx context.Context, key, token string, announce bool) (bool, error) {
	flag := "0"
	if announce {
		flag = "1"
	}
	n, err := g.run(ctx, releaseScript, 1, key, token, flag)
	return n == 1, err
}

func (g *goRedis) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n, err := g.run(ctx, extendScript, 1, key, token, ttl.Milliseconds())
	return n == 1, err
}

// sendOnce wraps a command that go-redis must not resend after it may
// have reached the node: go-redis retries a command whose connection broke
// (MaxRetries, 3 by default), and the retry's answer would describe the
// first execution's effect (see Backend). A pipeline holding one is not
// resent either. The wrapped command keeps its result.
type sendOnce struct{ redis.Cmder }

func (sendOnce) NoRetry() bool { return true }
