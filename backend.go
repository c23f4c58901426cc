package redlock

import (
	"context"
	_ "embed"
	"errors"
	"time"
)

// The backend contract: what a client adapter (package goredis, or one of
// your own) must provide and guarantee. Backend is required; Fencer and
// Notifier are optional capabilities the lockers discover with a type
// assertion. Package backendtest checks an adapter against every rule
// below; run it from the adapter's tests.

// Backend is one independent Redis master. A Single locker uses one; a
// Redlock uses several that share nothing (no replication between them).
//
// Every method must be safe for concurrent use, atomic on the node (one
// command or one script), and bounded by its context: the lockers give
// every node call a deadline (the per-node timeout) and rely on it to keep
// a dead or paused node from stalling a round, and a call whose context is
// cancelled must return promptly with an error matching the context's.
//
// An implementation must never send a command a second time after it may
// have reached the node (a client library's automatic retry after a broken
// connection): the second answer would describe the first one's effect. A
// resent Acquire would find our own key and answer "held"; a resent Release
// would find it gone and answer "not ours". A call whose outcome is
// unknown returns an error; the lockers treat it as "may have happened"
// (an acquisition is rolled back there, a release or an extension does not
// count toward the quorum).
type Backend interface {
	// Name identifies the node in errors and logs, usually its address.
	// Two Backends with the same Name are the same node: New refuses
	// them, since one server counted twice would fake a quorum.
	Name() string

	// Acquire sets key to token with the given TTL (Redis keeps it in
	// milliseconds) only if key does not exist: SET key token NX PX ttl.
	// It reports whether it set the key; a key that exists, whatever it
	// holds, is "not set" (false, nil).
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error)

	// Release deletes key only if it holds token, and reports whether it
	// did (Lua.Release). When announce is true and the key was deleted,
	// it also publishes token on ReleaseChannel(key) in the same atomic
	// step: waiters (Notifier) retry on that message, so a release that
	// does not announce leaves them sleeping out their backoff. A failed
	// announcement (PUBLISH refused by an ACL) must not fail the release.
	Release(ctx context.Context, key, token string, announce bool) (bool, error)

	// Extend resets key's TTL only if it holds token, and reports whether
	// it did (Lua.Extend); it never creates the key.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
}

// Fencer is the optional capability of a Backend that issues fencing
// tokens (WithFencing): each node keeps, per lock key, a counter that
// never expires and never goes down. New, NewSingle and Lock refuse
// WithFencing over a node that is not a Fencer, with ErrInvalid.
type Fencer interface {
	// AcquireFenced is Acquire that, only when it sets the key, also
	// increments the key's fence counter in the same atomic step and
	// returns its new value (≥ 1). Run again with the same token while
	// the key holds it (a resend), it answers true with the counter's
	// current value, unchanged (Lua.AcquireFenced).
	AcquireFenced(ctx context.Context, key, token string, ttl time.Duration) (ok bool, fence int64, err error)

	// RaiseFence sets the key's fence counter to at least fence, only
	// while key holds token, atomically, and reports whether key held
	// token (and so whether the counter is now at least fence). It never
	// lowers the counter (Lua.RaiseFence).
	RaiseFence(ctx context.Context, key, token string, fence int64) (bool, error)
}

// Notifier is the optional capability of a Backend that tells waiters
// that a key was released (hand-off, WithHandoff): it subscribes to the
// announcements that Release publishes on ReleaseChannel(key).
type Notifier interface {
	// Notify subscribes to releases of key. It returns once the
	// subscription is active on the node, so no release after it returns
	// is missed. From then until stop is called, every release of key
	// calls released with the message's payload (the releasing token, so
	// that a waiter can tell its own rollbacks), from the node's receiving
	// goroutine: released must be quick and must not block. When the
	// connection to the node dropped and was restored, releases in
	// between may have been missed: released is then called with payload
	// "", once the subscription is active again. Calls with other
	// payloads, or with no release behind them, are allowed (a key of the
	// same name in another database, a message published by someone
	// else); a call means only that the key may be free. stop must be
	// called; it returns promptly and only once no call to released is in
	// progress or will follow.
	Notify(ctx context.Context, key string, released func(payload string)) (stop func(), err error)
}

// Transferrer is the optional capability of a Backend that hands a held
// key from one token to another in one atomic step. With it on every
// node, Unlock hands the key straight to the first waiter of the same
// locker (handoff.go): one round instead of a release, its announcement
// and the waiter's acquisition, and the key is never free in between.
type Transferrer interface {
	// Transfer sets key to newToken with the TTL only if it holds
	// oldToken, and reports whether it did (Lua.Transfer). It never
	// creates the key and announces nothing. A node that keeps the
	// queues of FairQueuer does not hand over a key whose queue has
	// entries: it returns ErrWaitersQueued and leaves the key holding
	// oldToken, and Unlock releases the key to the queue's head instead.
	Transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error)
}

// ErrWaitersQueued is Transfer's answer when the key holds the old token
// but Lock calls wait in its queue (fair.go): they came first, so the key
// is not handed to a waiter of the releasing locker. Unlock handles it;
// it never reaches a caller.
var ErrWaitersQueued = errors.New("redlock: Lock calls wait in the key's queue")

// Starter is the optional capability of a Backend that splits its hot
// calls in two, so that a round needs no goroutine per node: StartAcquire,
// StartRelease and StartExtend send the command of Acquire, Release or
// Extend and return at once, without waiting for the reply; the returned
// Pending's Finish waits for it and answers as the method would. A round
// over nodes that are all Starters starts every node's call from the
// calling goroutine, then finishes each in turn; a round with one node
// that is not runs a goroutine per node as before.
//
// Every rule of Backend holds for the pair as for the one call: the
// command is sent at most once, and Finish is bounded by the context
// given to Start (its deadline; a call whose context is already done at
// Start sends nothing and its Finish returns the context's error).
// Start never waits on the network beyond handing the command to a
// connection that is up: a node that must dial first does so elsewhere
// (goredis: on its sender goroutine) and Finish waits for it, since a
// dial to a node that does not answer lasts until the deadline, and the
// round's other nodes, started after it, would start too late to count.
// A Start that fails returns a Pending whose Finish reports the error
// at once. The caller calls Finish exactly once for every Start, from
// the goroutine that started it and in the order started (a node may
// hold a second call in flight on one goroutine behind the first), and
// uses the Pending no more after it. Calls of other goroutines on the
// same node may be in flight meanwhile.
type Starter interface {
	StartAcquire(ctx context.Context, key, token string, ttl time.Duration) Pending
	StartRelease(ctx context.Context, key, token string, announce bool) Pending
	StartExtend(ctx context.Context, key, token string, ttl time.Duration) Pending
}

// TransferStarter is the optional capability of a Starter that is also a
// Transferrer and splits Transfer the same way: StartTransfer sends its
// command and returns at once, and the Pending's Finish answers as
// Transfer would, under every rule of Starter. A transfer round (hand-off
// within a locker) over nodes that are all TransferStarters runs without
// a goroutine per node.
type TransferStarter interface {
	StartTransfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) Pending
}

// lacking returns the first of nodes that does not implement the optional
// capability T, or nil when every node does.
func lacking[T any](nodes []Backend) Backend {
	for _, b := range nodes {
		if _, ok := b.(T); !ok {
			return b
		}
	}
	return nil
}

// FairStarter is the optional capability of a Starter that is also a
// FairQueuer and splits AcquireFair and ReleaseFair the same way: each
// sends its command and returns at once, and the FairPending's FinishFair,
// or the Pending's Finish, answers as the method would, under every rule
// of Starter. The rounds of a fair Lock call (its attempts, and the
// release of a lock taken through the queue) over nodes that are all
// FairStarters run without a goroutine per node.
type FairStarter interface {
	StartAcquireFair(ctx context.Context, key, token string, ttl time.Duration, ticket string, score int64, stay time.Duration, attempt int64) FairPending
	StartReleaseFair(ctx context.Context, key, token, ticket string, announce bool) Pending
}

// FairPending is an AcquireFair a FairStarter started.
type FairPending interface {
	// FinishFair returns the call's answer, as AcquireFair would have,
	// under the rules of Pending's Finish.
	FinishFair() (ok bool, ahead int64, err error)
}

// GrantPending is the optional capability of a Pending that a
// FairStarter's StartReleaseFair returned, whose release does not
// announce a grant to a waiter of the releasing ticket's own locker (its
// ticket begins with the same locker id and ".") but returns it:
// FinishGrant answers as Finish does, and returns that grant,
// "grant=" + ticket + " " + token, or "" when the release made none or
// announced it. The releasing Lock hands it to its locker's waiter
// itself (fair.go, "A grant within the process"); Finish drops it.
type GrantPending interface {
	Pending
	FinishGrant() (ok bool, grant string, err error)
}

// Pending is a call a Starter started.
type Pending interface {
	// Finish returns the call's answer, as Acquire, Release or Extend
	// would have: whether the node did it, or an error (its outcome
	// unknown). It waits at most until the deadline of the context the
	// call started with.
	Finish() (bool, error)
}

// KeyChecker is the optional capability of a Backend that cannot hold
// every key: a Redis Cluster node needs a lock key, its fence counter and
// its release channel in one hash slot. Lock and Do ask every node that is
// a KeyChecker before the first attempt and refuse a key that any of them
// rejects, so a bad key fails at once instead of costing a node's vote in
// every round. CheckKey must not touch the network; its error must match
// ErrInvalid.
type KeyChecker interface {
	CheckKey(key string) error
}

// MultiLocker is the optional capability of a Backend that locks a set of
// keys at once, all or nothing (Single.LockMany, Redlock.LockMany). The
// lockers pass keys distinct, non-empty and sorted, at most MaxKeys of
// them; each key is an ordinary lock key, so a set excludes every
// single-key lock (Acquire) on any of its keys and the reverse, and two
// sets exclude each other when they share a key. LockMany refuses a node
// that is not a MultiLocker, with ErrInvalid. Each method is one atomic
// step on the node (one script), with the rules of the single-key method
// it generalizes; the fence counters are those of the single-key methods
// (one per key).
type MultiLocker interface {
	// AcquireMany sets every key to token with the TTL when none of them
	// exists, and none otherwise; it reports whether it set them
	// (Lua.AcquireMany).
	AcquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error)

	// AcquireManyFenced is AcquireMany that, only when it sets the keys,
	// also increments each key's fence counter and writes the new values
	// into fences (len(fences) == len(keys), in key order). Run again
	// while every key holds token, it answers true with the counters'
	// current values (Lua.AcquireManyFenced).
	AcquireManyFenced(ctx context.Context, keys []string, token string, ttl time.Duration, fences []int64) (bool, error)

	// RaiseFences sets each key's fence counter to at least fences[i],
	// only while every key holds token, and reports whether they all did.
	// It never lowers a counter (Lua.RaiseFences).
	RaiseFences(ctx context.Context, keys []string, token string, fences []int64) (bool, error)

	// ReleaseMany deletes every key that still holds token, announcing
	// each deletion on ReleaseChannel(key) when announce is true (as
	// Release), and reports whether every key held it: a set of which a
	// key had expired was no longer held, though its other keys are
	// deleted all the same (Lua.ReleaseMany).
	ReleaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error)

	// ExtendMany resets every key's TTL when every key holds token, and
	// changes nothing otherwise; it reports whether it extended them. It
	// never creates a key (Lua.ExtendMany).
	ExtendMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error)
}

// RWLocker is the optional capability of a Backend that keeps read-write
// locks (ReadWriteLocker: RLock, WLock). Per key, the node keeps the
// readers, each with its own token and deadline, and the writer; the lock
// key itself holds the writer's token, or a marker while readers hold,
// with a TTL reaching the latest reader's deadline, so a writer is a
// mutex on the key (Acquire refuses it while readers hold, and the
// writer's release, extension and fence raise are Release, Extend and
// RaiseFence). Readers live in key + ":readers", the "writer waiting"
// mark in key + ":writer-waiting" (with Redis Cluster, in the key's hash
// slot). WLock and RLock refuse a node that is not an RWLocker, with
// ErrInvalid. Each method is one atomic step (one script of Lua).
type RWLocker interface {
	// AcquireRead adds token as a reader of key with the TTL, refused
	// while a writer (or mutex) holds key or a writer waits (its mark
	// exists). Granted, it also returns key's fence counter, unchanged
	// (the latest fenced writer's generation, 0 if none). A resend by a
	// reader that holds is granted again (Lua.AcquireRead).
	AcquireRead(ctx context.Context, key, token string, ttl time.Duration) (ok bool, fence int64, err error)

	// RaiseReadFence is RaiseFence for a reader: it raises key's fence
	// counter to at least fence, only while token's share is live
	// (Lua.RaiseReadFence).
	RaiseReadFence(ctx context.Context, key, token string, fence int64) (bool, error)

	// ReleaseRead removes token's share and reports whether it was live;
	// when no live reader is left it deletes the key and, when announce
	// is true, announces it on ReleaseChannel(key) as Release does
	// (Lua.ReleaseRead).
	ReleaseRead(ctx context.Context, key, token string, announce bool) (bool, error)

	// ExtendRead resets token's share to the TTL from now, only while it
	// is live, and reports whether it did (Lua.ExtendRead).
	ExtendRead(ctx context.Context, key, token string, ttl time.Duration) (bool, error)

	// AcquireWrite is Acquire (fenced: AcquireFenced, returning the
	// counter's new value) that, when refused, leaves the "writer
	// waiting" mark for mark (none when mark is 0), refusing new readers
	// meanwhile; granted, it deletes the mark (Lua.AcquireWrite).
	AcquireWrite(ctx context.Context, key, token string, ttl, mark time.Duration, fenced bool) (ok bool, fence int64, err error)
}

// KeySetChecker is the optional capability of a MultiLocker that cannot
// hold every set of keys together: a Redis Cluster node needs them (and
// their fence counters and release channels) in one hash slot. LockMany
// asks every node that is one before the first attempt, as it asks
// KeyChecker about each key. CheckKeys must not touch the network; its
// error must match ErrInvalid.
type KeySetChecker interface {
	CheckKeys(keys []string) error
}

// Peeker is the optional capability of a Backend that reads a lock key
// without taking it, for leader election (Election.Leader and Observe;
// NewElection refuses a node that is not a Peeker, with ErrInvalid).
type Peeker interface {
	// Peek returns the token that key holds ("" when key does not exist)
	// and the value of its fence counter (key + ":fence", 0 when it does
	// not exist) read in one atomic step, MGET key key:fence, so the pair
	// is one moment's state of the node: an election reads a leader's
	// term beside its token (see docs/election.md). It changes nothing
	// on the node; a counter that is not an integer is an error.
	Peek(ctx context.Context, key string) (token string, fence int64, err error)
}

// ReleaseChannel returns the pub/sub channel on which a release announces
// itself: "redlock:released:" + key. Adapters subscribe to it (Notifier);
// operators can watch a lock with SUBSCRIBE on it.
func ReleaseChannel(key string) string { return "redlock:released:" + key }

var (
	//go:embed release.lua
	releaseLua string
	//go:embed extend.lua
	extendLua string
	//go:embed acquire_fenced.lua
	acquireFencedLua string
	//go:embed fence.lua
	raiseFenceLua string
	//go:embed acquire_many.lua
	acquireManyLua string
	//go:embed acquire_many_fenced.lua
	acquireManyFencedLua string
	//go:embed release_many.lua
	releaseManyLua string
	//go:embed extend_many.lua
	extendManyLua string
	//go:embed fence_many.lua
	raiseFencesLua string
	//go:embed acquire_read.lua
	acquireReadLua string
	//go:embed fence_read.lua
	raiseReadFenceLua string
	//go:embed release_read.lua
	releaseReadLua string
	//go:embed extend_read.lua
	extendReadLua string
	//go:embed acquire_write.lua
	acquireWriteLua string
	//go:embed transfer.lua
	transferLua string
)

// Lua holds the source of the scripts a Redis adapter runs, so that no
// adapter keeps a copy of its own. Each script's first lines document its
// KEYS, ARGV and reply; run them with EVALSHA (falling back to EVAL on
// NOSCRIPT), never resending one that may have run.
//
//   - Release: KEYS[1] lock key; ARGV[1] token, ARGV[2] "1" to announce
//     with PUBLISH, "2" to announce with SPUBLISH (sharded pub/sub, Redis
//     7.0; for a Redis Cluster, where the channel hashes to the key's slot
//     when the key has a hash tag), anything else ("0") not to announce.
//     Deletes the key if it holds the token, publishing the token on
//     ReleaseChannel(key) when asked; replies 1 if deleted, 0 otherwise.
//   - Extend: KEYS[1] lock key; ARGV[1] token, ARGV[2] TTL in ms. Replies
//     1 if the key held the token and its TTL was reset, 0 otherwise.
//   - AcquireFenced: KEYS[1] lock key, KEYS[2] its fence counter; ARGV[1]
//     token, ARGV[2] TTL in ms. Replies the new counter value, the
//     current one on a resend by the holder, or 0 when the key is held by
//     another token.
//   - RaiseFence: KEYS[1] lock key, KEYS[2] its fence counter; ARGV[1]
//     token, ARGV[2] fence. Replies 1 if the key held the token (the
//     counter is now at least ARGV[2]), 0 otherwise.
//   - Transfer: KEYS[1] lock key, KEYS[2] its queue (QueueKeys);
//     ARGV[1] token, ARGV[2] the next holder's token, ARGV[3] TTL in ms.
//     Sets the key to ARGV[2] with the TTL if it held ARGV[1] and the
//     queue does not exist; replies 1 if so, 0 if the key did not hold
//     ARGV[1], -1 if it did but the queue exists (ErrWaitersQueued).
//
// The scripts of MultiLocker take n distinct lock keys (KEYS[1..n]) and,
// when fenced, their n fence counters after them (KEYS[n+1..2n]):
//
//   - AcquireMany: ARGV[1] token, ARGV[2] TTL in ms. Sets every key, or
//     none when any exists; replies 1 or 0.
//   - AcquireManyFenced: ARGV as AcquireMany. Replies the n new counter
//     values in key order (their current values on a resend by the
//     holder), or an empty array when not set.
//   - RaiseFences: ARGV[1] token, ARGV[2..n+1] the fences. Replies 1 if
//     every key held the token (each counter is now at least its fence),
//     0 otherwise (nothing changed).
//   - ReleaseMany: ARGV as Release. Deletes every key holding the token,
//     announcing each; replies how many it deleted (n: the set was held).
//   - ExtendMany: ARGV as Extend. Replies 1 if every key held the token
//     and all were extended, 0 otherwise (nothing changed).
//
// The scripts of RWLocker (each documents its KEYS and ARGV; the readers
// key is key + ":readers", the mark key + ":writer-waiting", the counter
// key + ":fence"):
//
//   - AcquireRead: replies the fence counter (>= 0) if granted, -1 if not.
//   - RaiseReadFence, ExtendRead: reply 1 or 0.
//   - ReleaseRead: replies 1 if the share was live, 0 otherwise.
//   - AcquireWrite: replies 1 or the new counter (fenced) if granted, 0
//     if not.
//
// Both keys of a fenced script (every key of a MultiLocker script) must
// live on one node: with Redis Cluster, in one hash slot, and so must the
// release channel for SPUBLISH; a key with a hash tag ("{order:1}")
// shares it with key + ":fence" and ReleaseChannel(key) (package goredis
// derives one for a key without; the keys of one set must share a tag).
var Lua = struct {
	Release, Extend, AcquireFenced, RaiseFence string

	AcquireMany, AcquireManyFenced, RaiseFences, ReleaseMany, ExtendMany string

	AcquireRead, RaiseReadFence, ReleaseRead, ExtendRead, AcquireWrite string

	Transfer string
}{releaseLua, extendLua, acquireFencedLua, raiseFenceLua,
	acquireManyLua, acquireManyFencedLua, raiseFencesLua, releaseManyLua, extendManyLua,
	acquireReadLua, raiseReadFenceLua, releaseReadLua, extendReadLua, acquireWriteLua,
	transferLua}
