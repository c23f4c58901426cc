package rueidisnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// Option adjusts New.
type Option func(*options)

type options struct {
	client     *rueidis.ClientOption // WithClientOption; nil without
	ackSet     bool
	ackN       int
	ackTimeout time.Duration
}

// WithClientOption tells New the options the client was made with
// (rueidis.NewClient(opt)), which a rueidis client keeps to itself. New
// needs them for a client in cluster or sentinel mode, to name the node
// as package goredis names one of the same deployment:
//
//   - cluster mode: "cluster[addr ...]", opt.InitAddress sorted;
//   - sentinel mode: "sentinel[master@addr ...]", opt.Sentinel.MasterSet
//     and the sentinels of opt.InitAddress sorted.
//
// A rueidis node and a go-redis node of one deployment, seeded alike (in
// any order), are then one node, and a Redlock refuses them as
// duplicates. With the options at hand New also refuses those that break
// the adapter's guarantees: ConnLifetime (which resends commands),
// SendToReplicas and ReplicaOnly (a lock lives on a master).
func WithClientOption(opt rueidis.ClientOption) Option {
	return func(o *options) { o.client = &opt }
}

// WithReplicaAck makes every script call wait until numReplicas replicas
// of the server that ran it acknowledge its writes, for at most timeout:
// the script and "WAIT numReplicas timeout" go out on one connection,
// neither resent, so WAIT counts the replicas that have the script's
// writes. A call that too few replicas acknowledged in time returns an
// error matching ErrReplicaAck: the lockers count the node's vote as
// failed and roll back an acquisition there. The node says so
// (driver.Info.ReplicaAck).
//
// On a Redis Cluster both go to the master of the keys' slot as
// rueidis's slot map has it, and numReplicas counts its replicas. A
// master that no longer owns the slot answers MOVED (or ASK): the script
// did not run, the call fails, rueidis refreshes its map, and nothing is
// resent to the new owner.
//
// A failover to a replica that acknowledged keeps the lock. WAIT does not
// make Redis strongly consistent, though (a replica that did not
// acknowledge may still be promoted, an acknowledgement is in memory, not
// on disk): goredis.WithReplicaAck, which works alike, lists the limits.
//
// timeout must be at least a millisecond (WAIT 0 waits forever) and fit
// well inside the lockers' per-node timeout, which bounds the whole call.
// New refuses numReplicas < 1 or a shorter timeout, with
// redlock.ErrInvalid.
func WithReplicaAck(numReplicas int, timeout time.Duration) Option {
	return func(o *options) { o.ackSet, o.ackN, o.ackTimeout = true, numReplicas, timeout }
}

// ErrReplicaAck is the error (wrapped) of a script call whose writes too
// few replicas acknowledged in time (WithReplicaAck).
var ErrReplicaAck = errors.New("rueidisnode: too few replicas acknowledged the write")

// name names the node of client c (see New and WithClientOption), and
// checks the client's options when they are known.
func (o *options) name(c rueidis.Client) (string, error) {
	if err := o.checkClientOption(c.Mode()); err != nil {
		return "", err
	}
	switch m := c.Mode(); m {
	case rueidis.ClientModeStandalone:
		return standaloneName(c)
	case rueidis.ClientModeCluster:
		if o.client == nil {
			return "", fmt.Errorf("%w: rueidisnode.New: a rueidis client in cluster mode needs rueidisnode.WithClientOption(opt) with its options, to be named after its seed addresses",
				redlock.ErrInvalid)
		}
		return "cluster" + sortedList(o.client.InitAddress, "[", "]"), nil
	case rueidis.ClientModeSentinel:
		if o.client == nil {
			return "", fmt.Errorf("%w: rueidisnode.New: a rueidis client in sentinel mode needs rueidisnode.WithClientOption(opt) with its options, to be named after its master and sentinels",
				redlock.ErrInvalid)
		}
		return "sentinel" + sortedList(o.client.InitAddress, "["+o.client.Sentinel.MasterSet+"@", "]"), nil
	default:
		return "", fmt.Errorf("%w: rueidisnode.New: a rueidis client in %s mode is not supported", redlock.ErrInvalid, m)
	}
}

// checkClientOption refuses options that do not match the client's mode
// or that break the adapter's guarantees.
func (o *options) checkClientOption(mode rueidis.ClientMode) error {
	opt := o.client
	if opt == nil {
		return nil
	}
	sentinel := opt.Sentinel.MasterSet != ""
	switch {
	case len(opt.InitAddress) == 0:
		return fmt.Errorf("%w: rueidisnode.New: WithClientOption: the options have no InitAddress", redlock.ErrInvalid)
	case sentinel != (mode == rueidis.ClientModeSentinel):
		return fmt.Errorf("%w: rueidisnode.New: WithClientOption: Sentinel.MasterSet %q for a client in %s mode: the options are not the client's",
			redlock.ErrInvalid, opt.Sentinel.MasterSet, mode)
	case opt.ConnLifetime != 0:
		return fmt.Errorf("%w: rueidisnode.New: ConnLifetime %v: rueidis resends unanswered commands when a connection's lifetime ends; leave it at zero",
			redlock.ErrInvalid, opt.ConnLifetime)
	case opt.SendToReplicas != nil || opt.ReplicaOnly:
		return fmt.Errorf("%w: rueidisnode.New: SendToReplicas or ReplicaOnly: a lock lives on a master; give the adapter a client that sends everything there",
			redlock.ErrInvalid)
	}
	return nil
}

// standaloneName names a standalone client after the one node it knows.
func standaloneName(c rueidis.Client) (string, error) {
	nodes := c.Nodes()
	if len(nodes) != 1 {
		return "", fmt.Errorf("%w: rueidisnode.New: the client knows %d nodes; give it one master and no replicas",
			redlock.ErrInvalid, len(nodes))
	}
	var name string
	for addr := range nodes {
		name = addr
	}
	return name, nil
}

// sortedList writes addrs sorted, without repetitions, space-separated,
// between open and end, as goredis does: two clients seeded in another
// order are one node.
func sortedList(addrs []string, open, end string) string {
	return open + strings.Join(slices.Compact(slices.Sorted(slices.Values(addrs))), " ") + end
}

// replicaAck is WithReplicaAck's WAIT, checked.
type replicaAck struct {
	n       int64
	timeout time.Duration
	name    string
}

func (o *options) replicaAck(name string) (*replicaAck, error) {
	if !o.ackSet {
		return nil, nil
	}
	if o.ackN < 1 || o.ackTimeout < time.Millisecond {
		return nil, fmt.Errorf("%w: rueidisnode.New: node %q: WithReplicaAck(%d, %v): want at least one replica and a timeout of at least 1ms",
			redlock.ErrInvalid, name, o.ackN, o.ackTimeout)
	}
	return &replicaAck{n: int64(o.ackN), timeout: o.ackTimeout, name: name}, nil
}

// run sends cmd and a WAIT on one connection, neither resent, and returns
// cmd's converted reply, or an error matching ErrReplicaAck when too few
// replicas acknowledged. On a standalone or sentinel client DoMulti does
// it: a pipeline holding WAIT, a blocking command, goes out on one
// connection of the client's blocking pool, closed if the call fails. A
// cluster client's DoMulti would follow a MOVED for the script alone, away
// from its WAIT: there a dedicated connection to the slot's master
// carries both, and follows no redirection.
func (a *replicaAck) run(ctx context.Context, n *Node, cmd rueidis.Completed) (any, error) {
	wait := n.c.B().Wait().Numreplicas(a.n).Timeout(a.timeout.Milliseconds()).Build()
	var rs []rueidis.RedisResult
	if n.info.Cluster {
		_ = n.c.Dedicated(func(dc rueidis.DedicatedClient) error {
			rs = dc.DoMulti(ctx, cmd, wait)
			if rs[0].NonRedisError() != nil || rs[1].NonRedisError() != nil {
				dc.Close() // its state is unknown: not back to the pool
			}
			return nil
		})
	} else {
		rs = n.c.DoMulti(ctx, cmd, wait)
	}
	v, err := value(rs[0])
	if err != nil {
		return nil, err
	}
	got, err := rs[1].AsInt64()
	if err != nil {
		return nil, fmt.Errorf("%w: node %s: WAIT %d %d: %w", ErrReplicaAck, a.name, a.n, a.timeout.Milliseconds(), err)
	}
	if got < a.n {
		return nil, fmt.Errorf("%w: node %s: %d of %d replicas within %v", ErrReplicaAck, a.name, got, a.n, a.timeout)
	}
	return v, nil
}
