package redlock

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"time"

	"github.com/quorumlock/redlock/driver"
)

// The scripts, and the one call of each that a round makes on a node.
// Each script's first lines document its KEYS, ARGV and reply. Every name
// a script touches is derived here from the lock key as the node keeps it
// (keyOf), so on a Redis Cluster they share its hash slot.

var (
	//go:embed fence_lib.lua
	fenceLib string
	//go:embed acquire.lua
	acquireLua string
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
	//go:embed acquire_fair.lua
	acquireFairLua string
	//go:embed release_fair.lua
	releaseFairLua string
	//go:embed peek.lua
	peekLua string
)

var (
	acquireScript           = driver.NewScript("acquire", acquireLua)
	releaseScript           = driver.NewScript("release", releaseLua)
	extendScript            = driver.NewScript("extend", extendLua)
	acquireFencedScript     = driver.NewScript("acquire_fenced", fenceLib+acquireFencedLua)
	raiseFenceScript        = driver.NewScript("fence", fenceLib+raiseFenceLua)
	acquireManyScript       = driver.NewScript("acquire_many", acquireManyLua)
	acquireManyFencedScript = driver.NewScript("acquire_many_fenced", fenceLib+acquireManyFencedLua)
	releaseManyScript       = driver.NewScript("release_many", releaseManyLua)
	extendManyScript        = driver.NewScript("extend_many", extendManyLua)
	raiseFencesScript       = driver.NewScript("fence_many", fenceLib+raiseFencesLua)
	acquireReadScript       = driver.NewScript("acquire_read", fenceLib+acquireReadLua)
	raiseReadFenceScript    = driver.NewScript("fence_read", fenceLib+raiseReadFenceLua)
	releaseReadScript       = driver.NewScript("release_read", releaseReadLua)
	extendReadScript        = driver.NewScript("extend_read", extendReadLua)
	acquireWriteScript      = driver.NewScript("acquire_write", fenceLib+acquireWriteLua)
	transferScript          = driver.NewScript("transfer", transferLua)
	acquireFairScript       = driver.NewScript("acquire_fair", fenceLib+acquireFairLua)
	releaseFairScript       = driver.NewScript("release_fair", releaseFairLua)
	peekScript              = driver.NewScript("peek", peekLua)
)

// The names derived from a lock key (as the node keeps it).
const (
	fenceSuffix   = ":fence"          // the fence counter
	readersSuffix = ":readers"        // a read-write lock's readers
	waitingSuffix = ":writer-waiting" // its "writer waiting" mark
	queueSuffix   = ":queue"          // the fair queue, its expiries and grants
)

// queueKeys are the lock key and the three keys of its fair queue.
func queueKeys(k string) []string {
	return []string{k, k + queueSuffix, k + queueSuffix + ":exp", k + queueSuffix + ":grant"}
}

// errWaitersQueued is a transfer's answer when the key holds the old
// token but Lock calls wait in its queue (fair.go): they came first, so
// the key is not handed to a waiter of the releasing locker; Unlock
// releases it to the queue's head instead.
var errWaitersQueued = errors.New("redlock: Lock calls wait in the key's queue")

// errNoNotifier is the refusal of a node that cannot notify.
var errNoNotifier = invalidf("node cannot notify")

func (n *node) acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	// Keys and arguments share one array: both escape through the
	// driver.Node interface, so two slices would cost two allocations.
	// The keys' capacity ends at their length: an append by the adapter
	// copies them, and never writes over the arguments.
	a := [...]string{k, token, ms(ttl)}
	r, err := n.Eval(ctx, acquireScript, a[:1:1], a[1:]...)
	return yes(acquireScript, r, err)
}

func (n *node) release(ctx context.Context, key, token string, announce bool) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	a := [...]string{k, token, n.announce(announce)} // one allocation (see acquire)
	r, err := n.Eval(ctx, releaseScript, a[:1:1], a[1:]...)
	return yes(releaseScript, r, err)
}

// extend pushes a held key's expiry out to ttl from now, and, when life
// is not 0 (a fenced lock), its fence counter's, if it has one, to at
// least life.
func (n *node) extend(ctx context.Context, key, token string, ttl, life time.Duration) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	if life == 0 {
		a := [...]string{k, token, ms(ttl)} // one allocation (see acquire)
		r, err := n.Eval(ctx, extendScript, a[:1:1], a[1:]...)
		return yes(extendScript, r, err)
	}
	a := [...]string{k, k + fenceSuffix, token, ms(ttl), ms(life)}
	r, err := n.Eval(ctx, extendScript, a[:2:2], a[2:]...)
	return yes(extendScript, r, err)
}

// acquireFenced is acquire that, when it sets the key, also issues the
// next fencing token (fence_lib.lua), its counter kept for life after;
// a resend by the holder answers the token unchanged.
func (n *node) acquireFenced(ctx context.Context, key, token string, ttl, life time.Duration) (bool, int64, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, 0, err
	}
	r, err := n.Eval(ctx, acquireFencedScript, []string{k, k + fenceSuffix}, token, ms(ttl), ms(life))
	f, err := integer(acquireFencedScript, r, err)
	if err != nil || f <= 0 {
		return false, 0, err
	}
	return true, f, nil
}

// raiseFence sets key's fence counter to at least fence while key holds
// token; it never lowers it.
func (n *node) raiseFence(ctx context.Context, key, token string, fence int64, life time.Duration) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, raiseFenceScript, []string{k, k + fenceSuffix}, token, strconv.FormatInt(fence, 10), ms(life))
	return yes(raiseFenceScript, r, err)
}

// withFences returns keys followed by their fence counters.
func withFences(keys []string) []string {
	out := make([]string, 0, 2*len(keys))
	out = append(out, keys...)
	for _, k := range keys {
		out = append(out, k+fenceSuffix)
	}
	return out
}

func (n *node) acquireMany(ctx context.Context, keys []string, token string, ttl time.Duration) (bool, error) {
	ks, err := n.keysOf(keys)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, acquireManyScript, ks, token, ms(ttl))
	return yes(acquireManyScript, r, err)
}

// acquireManyFenced is acquireMany that, when it sets the keys, writes
// each key's next fencing token into fences (in key order).
func (n *node) acquireManyFenced(ctx context.Context, keys []string, token string, ttl, life time.Duration, fences []int64) (bool, error) {
	ks, err := n.keysOf(keys)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, acquireManyFencedScript, withFences(ks), token, ms(ttl), ms(life))
	got, err := integers(acquireManyFencedScript, r, err)
	if err != nil || len(got) == 0 {
		return false, err
	}
	if len(got) != len(fences) {
		return false, &badReply{acquireManyFencedScript.Name(), r}
	}
	copy(fences, got)
	return true, nil
}

func (n *node) raiseFences(ctx context.Context, keys []string, token string, fences []int64, life time.Duration) (bool, error) {
	ks, err := n.keysOf(keys)
	if err != nil {
		return false, err
	}
	args := make([]string, 0, 2+len(fences))
	args = append(args, token, ms(life))
	for _, f := range fences {
		args = append(args, strconv.FormatInt(f, 10))
	}
	r, err := n.Eval(ctx, raiseFencesScript, withFences(ks), args...)
	return yes(raiseFencesScript, r, err)
}

// releaseMany deletes every key that still holds token and reports
// whether all of them did.
func (n *node) releaseMany(ctx context.Context, keys []string, token string, announce bool) (bool, error) {
	ks, err := n.keysOf(keys)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, releaseManyScript, ks, token, n.announce(announce))
	deleted, err := integer(releaseManyScript, r, err)
	return err == nil && deleted == int64(len(keys)), err
}

func (n *node) extendMany(ctx context.Context, keys []string, token string, ttl, life time.Duration) (bool, error) {
	ks, err := n.keysOf(keys)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, extendManyScript, withFences(ks), token, ms(ttl), ms(life))
	return yes(extendManyScript, r, err)
}

// acquireRead adds token as a reader of key; granted, with a counter
// life (fenced), it also returns the key's current fencing token.
func (n *node) acquireRead(ctx context.Context, key, token string, ttl, life time.Duration) (bool, int64, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, 0, err
	}
	fenced := "0"
	if life > 0 {
		fenced = "1"
	}
	r, err := n.Eval(ctx, acquireReadScript, []string{k, k + readersSuffix, k + waitingSuffix, k + fenceSuffix},
		token, ms(ttl), fenced, ms(life))
	f, err := integer(acquireReadScript, r, err)
	if err != nil || f < 0 {
		return false, 0, err
	}
	return true, f, nil
}

func (n *node) raiseReadFence(ctx context.Context, key, token string, fence int64, life time.Duration) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, raiseReadFenceScript, []string{k, k + readersSuffix, k + fenceSuffix}, token,
		strconv.FormatInt(fence, 10), ms(life))
	return yes(raiseReadFenceScript, r, err)
}

func (n *node) releaseRead(ctx context.Context, key, token string, announce bool) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, releaseReadScript, []string{k, k + readersSuffix}, token, n.announce(announce))
	return yes(releaseReadScript, r, err)
}

func (n *node) extendRead(ctx context.Context, key, token string, ttl, life time.Duration) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, extendReadScript, []string{k, k + readersSuffix, k + fenceSuffix}, token, ms(ttl), ms(life))
	return yes(extendReadScript, r, err)
}

// acquireWrite is acquire (with a counter life: acquireFenced) that, when
// refused, leaves the "writer waiting" mark for mark (none when mark is 0).
func (n *node) acquireWrite(ctx context.Context, key, token string, ttl, mark, life time.Duration) (bool, int64, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, 0, err
	}
	flag := "0"
	if life > 0 {
		flag = "1"
	}
	r, err := n.Eval(ctx, acquireWriteScript, []string{k, k + waitingSuffix, k + fenceSuffix}, token, ms(ttl), flag, ms(mark), ms(life))
	f, err := integer(acquireWriteScript, r, err)
	if err != nil || f <= 0 {
		return false, 0, err
	}
	if life <= 0 {
		f = 0
	}
	return true, f, nil
}

// transfer sets key to newToken with ttl if it holds oldToken and no
// Lock call waits in its queue (errWaitersQueued).
func (n *node) transfer(ctx context.Context, key, oldToken, newToken string, ttl time.Duration) (bool, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, err
	}
	r, err := n.Eval(ctx, transferScript, []string{k, k + queueSuffix}, oldToken, newToken, ms(ttl))
	v, err := integer(transferScript, r, err)
	switch {
	case err != nil:
		return false, err
	case v == -1:
		return false, errWaitersQueued
	}
	return yes(transferScript, r, nil)
}

// fairAttempt is what acquireFair sends besides the key and token.
type fairAttempt struct {
	ttl     time.Duration
	ticket  string
	score   int64
	stay    time.Duration
	attempt int64
	life    time.Duration // the fence counter's, for a fenced call; 0 otherwise
}

// acquireFair is a fair attempt (fair.go): it queues the ticket with its
// score, registers token as what a release grants it, and sets the key if
// it is free and the ticket is the head (or holds the entry's earlier
// grant). Granted, it returns the fencing token of a fenced call (0
// otherwise); not granted, how many entries are ahead.
func (n *node) acquireFair(ctx context.Context, key, token string, a fairAttempt) (ok bool, fenceOrAhead int64, err error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, 0, err
	}
	keys, args := queueKeys(k), []string{token, ms(a.ttl), a.ticket,
		strconv.FormatInt(a.score, 10), ms(a.stay), strconv.FormatInt(a.attempt, 10)}
	if a.life > 0 {
		keys, args = append(keys, k+fenceSuffix), append(args, "1", ms(a.life))
	}
	r, err := n.Eval(ctx, acquireFairScript, keys, args...)
	v, err := integer(acquireFairScript, r, err)
	switch {
	case err != nil:
		return false, 0, err
	case v >= 1 && a.life > 0:
		return true, v, nil
	case v == 1:
		return true, 0, nil
	}
	return false, -v, nil
}

// releaseFair removes ticket's entry and deletes key if it holds token
// (or the token a release granted to ticket), handing it on to the
// queue's head. With hand, a grant to a head of the releasing ticket's
// own locker is returned ("grant=" + ticket + " " + token) instead of
// announced. An empty token leaves the queue without a lock.
func (n *node) releaseFair(ctx context.Context, key, token, ticket string, announce, hand bool) (ok bool, grant string, err error) {
	k, err := n.keyOf(key)
	if err != nil {
		return false, "", err
	}
	grants, hands := "1", "0"
	if n.info.ReplicaAck { // nothing waits for the replicas of a grant
		grants = "0"
	}
	if hand {
		hands = "1"
	}
	r, err := n.Eval(ctx, releaseFairScript, queueKeys(k), token, n.announce(announce), ticket, grants, hands)
	if err != nil {
		return false, "", err
	}
	if g, ok := r.(string); ok {
		return true, g, nil
	}
	ok, err = yes(releaseFairScript, r, nil)
	return ok, "", err
}

// peek returns the token key holds ("" if none) and its fence counter (0
// if none), read in one atomic step.
func (n *node) peek(ctx context.Context, key string) (string, int64, error) {
	k, err := n.keyOf(key)
	if err != nil {
		return "", 0, err
	}
	r, err := n.Eval(ctx, peekScript, []string{k, k + fenceSuffix})
	if err != nil {
		return "", 0, err
	}
	vals, ok := r.([]any)
	if !ok || len(vals) != 2 {
		return "", 0, &badReply{peekScript.Name(), r}
	}
	tok, _ := vals[0].(string)
	c, ok := vals[1].(string)
	if !ok {
		if vals[1] != nil {
			return "", 0, &badReply{peekScript.Name(), r}
		}
		return tok, 0, nil
	}
	fence, err := strconv.ParseInt(c, 10, 64)
	if err != nil {
		return "", 0, &badReply{peekScript.Name(), r}
	}
	return tok, fence, nil
}

// notify subscribes to the releases of each of keys, and, with locker
// set, to the grants a fair release addresses to that locker's waiters
// (grantChannel), in one subscription.
func (n *node) notify(ctx context.Context, keys []string, locker string, released func(payload string)) (func(), error) {
	if n.sub == nil {
		return nil, errNoNotifier
	}
	channels := make([]string, 0, len(keys)+1)
	for _, key := range keys {
		k, err := n.keyOf(key)
		if err != nil {
			return nil, err
		}
		channels = append(channels, releaseChannel(k))
		if locker != "" {
			channels = append(channels, grantChannel(k, locker))
		}
	}
	return n.sub.Subscribe(ctx, released, channels...)
}
