package rueidisnode

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quorumlock/redlock"
	"github.com/redis/rueidis"
)

// Option adjusts New.
type Option func(*options)

type options struct {
	client *rueidis.ClientOption // WithClientOption; nil without
}

// WithClientOption tells New the options the client was made with
// (rueidis.NewClient(opt)). A rueidis client keeps its seed addresses and
// master name to itself, and a node of a Redis Cluster or of a master
// behind Redis Sentinel is named after them, as package goredis names
// its nodes, so New needs this option for a client in cluster or sentinel
// mode, and refuses such a client without it (with redlock.ErrInvalid):
//
//   - cluster mode: "cluster[addr ...]", the addresses of
//     opt.InitAddress sorted, goredis's name for a ClusterClient with
//     the same seeds;
//   - sentinel mode (opt.Sentinel.MasterSet set): "sentinel[master@addr
//     ...]", the master set and the sentinels of opt.InitAddress sorted,
//     goredis's name with WithFailover.
//
// So a rueidis node and a go-redis node of one deployment, seeded alike,
// are one node, and a Redlock refuses them as duplicates; give every
// client of a deployment the same addresses (in any order).
//
// With the options at hand New also refuses those that break the
// adapter's guarantees: ConnLifetime (which resends commands, see the
// package documentation), SendToReplicas and ReplicaOnly (a lock lives on
// a master). A standalone client keeps its address as its name.
func WithClientOption(opt rueidis.ClientOption) Option {
	return func(o *options) { o.client = &opt }
}

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
