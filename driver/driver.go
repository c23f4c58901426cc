// Package driver is the contract between package redlock and a Redis
// client: what an adapter implements, as database/sql/driver is for
// database/sql. Applications use package redlock; adapter authors use this
// package (and driver/drivertest to prove an adapter).
//
// The core owns every script and every rule of the algorithm. An adapter
// only runs the core's scripts on one node and, optionally, subscribes to
// pub/sub channels. Adding a primitive to the core changes no adapter.
//
// The adapters in this repository are goredis (go-redis v9) and
// rueidisnode (rueidis).
package driver

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
)

// Node is one Redis deployment that counts once toward a quorum: a
// standalone master, a master found through Sentinel, or a whole Redis
// Cluster. A locker of one master (NewSingle) uses one; a Redlock uses several that share
// nothing (no replication between them).
//
// Its methods are safe for concurrent use.
type Node interface {
	// Info describes the node. The lockers read it once, when they are
	// made.
	Info() Info

	// Eval runs script on the node with keys and args, atomically: by
	// EVALSHA with script.Hash(), and, only when the node answers
	// NOSCRIPT (it ran nothing), by EVAL with script.Source().
	//
	// The reply is converted as Redis sends it: an integer to int64, a
	// bulk or status string to string, a nil bulk or nil array to nil,
	// an array to []any of these; an error reply (a script's
	// redis.error_reply, or a command the script ran that failed) is
	// returned as an error carrying the node's text.
	//
	// Eval sends the script at most once: never again after it may have
	// reached the node (a client's automatic retry on a broken
	// connection), since the second answer would describe the first
	// one's effect. A call whose outcome is unknown returns an error; the
	// core treats it as "may have happened".
	//
	// Eval is bounded by ctx's deadline: it returns by then with an
	// error, whether or not the node has answered, and a ctx already done
	// sends nothing. The core gives every call a deadline (the per-node
	// timeout) and relies on it to keep a dead or paused node from
	// stalling a round; a cancellation before the deadline should end the
	// call too, but a client that honours it only while connecting (as
	// go-redis does) is allowed.
	Eval(ctx context.Context, script *Script, keys []string, args ...string) (any, error)
}

// Info describes a Node.
type Info struct {
	// Name identifies the node in errors and logs, usually its address.
	// Two nodes with one Name are one node: the lockers refuse them, since
	// one server counted twice would fake a quorum. It must not contain a
	// password.
	Name string

	// Cluster marks a node that is a whole Redis Cluster. The core then
	// gives every Eval keys of one hash slot (a lock's names share its
	// key's hash tag), publishes releases with SPUBLISH, and its
	// Subscriber must subscribe with SSUBSCRIBE.
	Cluster bool

	// ReplicaAck marks a node whose Eval reports success only once
	// replicas acknowledged the script's writes (WAIT after the script, on
	// its connection). The core then never relies on a write that another
	// client's script made on a waiter's behalf (a fair release's grant),
	// since nothing waited for its replicas.
	ReplicaAck bool
}

// Subscriber is the optional capability of a Node that delivers pub/sub
// messages. Without it a waiter is not woken by releases and sleeps out
// its backoff delays.
type Subscriber interface {
	// Subscribe delivers each message published on channels to deliver,
	// until stop is called. It returns once the node has the subscription,
	// so that a message published after Subscribe returns is delivered;
	// or with an error, and nothing is delivered.
	//
	// deliver gets the message's payload, on a goroutine of the adapter;
	// it is quick and never blocks. After the connection dropped and was
	// restored, messages in between may be lost: deliver is then called
	// with "" once the subscription is active again. A call with a payload
	// nobody published (a message of another database) is allowed: the
	// core takes a message only as a hint.
	//
	// stop must be called. It returns without waiting for the network, and
	// once it returned deliver is not called again.
	Subscribe(ctx context.Context, deliver func(payload string), channels ...string) (stop func(), err error)
}

// Script is a Lua script of the core's, with the SHA1 that EVALSHA names
// it by.
type Script struct {
	name, src, hash string
}

// NewScript returns the script with the given name (for logs and test
// hooks) and source.
func NewScript(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, hash: hex.EncodeToString(sum[:])}
}

// Name returns the script's name, such as "acquire" or "release".
func (s *Script) Name() string { return s.name }

// Source returns the script's Lua source, for EVAL.
func (s *Script) Source() string { return s.src }

// Hash returns the hex SHA1 of the source, for EVALSHA.
func (s *Script) Hash() string { return s.hash }
