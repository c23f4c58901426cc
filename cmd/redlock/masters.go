package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/internal/redact"
	"github.com/redis/go-redis/v9"
)

// master is one Redis master that inspect and release talk to directly,
// with a go-redis client of its own.
type master struct {
	name string // host:port, with /db when not 0; never user info
	c    *redis.Client
}

// quorum is the number of masters out of n that make a majority: N/2+1.
func quorum(n int) int { return n/2 + 1 }

// openMasters makes one client per master, the masters given as redlock
// run takes them (runNodes: --addrs, else LOCK_DISTRIBUTED_NODES, each URL
// checked by envconfig, whose errors never show a password). A server
// given twice is refused, as redlock.New refuses it: counted twice it
// would fake a quorum. Clients honour context deadlines, never resend a
// command and dial once, within timeout. closeMasters closes them.
func openMasters(addrs string, lookup func(string) (string, bool), timeout time.Duration) ([]master, error) {
	urls, from, err := runNodes(addrs, lookup)
	if err != nil {
		return nil, err
	}
	var ms []master
	seen := map[string]bool{}
	for _, u := range urls {
		n, err := envconfig.ParseNode(u) // runNodes has checked it
		if err != nil {
			closeMasters(ms)
			return nil, nodesError(from, err)
		}
		o := n.Standalone
		switch {
		case o == nil:
			err = fmt.Errorf("%s: inspect and release talk to standalone masters only, not to a cluster or a master behind Sentinel", n)
		case seen[o.Addr]:
			err = fmt.Errorf("master %s is given twice; counted twice it would fake a quorum", o.Addr)
		}
		if err != nil {
			closeMasters(ms)
			return nil, fmt.Errorf("%s: %s", from, redact.URLs(err.Error()))
		}
		seen[o.Addr] = true
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
		o.DialTimeout = timeout
		o.DialerRetries = 1 // an operator's command reports a master down at once
		name := o.Addr
		if o.DB != 0 {
			name += "/" + strconv.Itoa(o.DB)
		}
		ms = append(ms, master{name: name, c: redis.NewClient(o)})
	}
	return ms, nil
}

func closeMasters(ms []master) {
	for _, m := range ms {
		m.c.Close()
	}
}

// nodeError words a master's failure for the report: "timeout" for a
// deadline, otherwise the client's error, with any URL user info masked.
func nodeError(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return redact.URLs(err.Error())
}

// tokenShown is how a token appears in output: its first 8 characters
// followed by "…", or whole when full is set (--full-tokens). A token is
// a capability (whoever has it can release or extend the lock), so it is
// shortened by default.
func tokenShown(token string, full bool) string {
	const keep = 8
	if full || len(token) <= keep {
		return token
	}
	return token[:keep] + "…"
}
