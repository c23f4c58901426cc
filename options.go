package redlock

import (
	"math"
	"time"
)

// Defaults used when an option is not given (see WithTTL and
// WithDriftFactor).
const (
	defaultTTL         = 10 * time.Second
	defaultDriftFactor = 0.01
	defaultFenceLife   = 24 * time.Hour
	// maxNodeTimeout caps the default per-node timeout (TTL/10).
	maxNodeTimeout = time.Second
)

// An Option configures a locker. Options given to New or NewSingle are the
// defaults for every Lock call; options given to Lock override them for
// that call only. Invalid values are reported as ErrInvalid by whichever
// call received them.
type Option func(*config)

type config struct {
	ttl         time.Duration
	strategy    Strategy
	driftFactor float64
	clock       clock
	nodeTimeout time.Duration // 0: TTL/10, at most one second
	renewEvery  time.Duration // 0: TTL/3
	autoRenew   bool
	fencing     bool
	fenceLife   time.Duration // WithFenceLifetime
	noHandoff   bool
	fair        bool // WithFairness (fair.go)
	unfair      bool // WithFairness(false) (fair.go)
	observer    Observer
	lines       *lines // the locker's waiters (line.go), shared by copies
	tokenSuffix string // appended to every attempt's random token (election.go)
}

func defaultConfig() config {
	return config{
		ttl:         defaultTTL,
		strategy:    Retry(defaultRetries, defaultRetryDelay),
		driftFactor: defaultDriftFactor,
		fenceLife:   defaultFenceLife,
		clock:       systemClock{},
		lines:       newLines(),
	}
}

// WithTTL sets how long the lock lives on each node before it expires by
// itself. The lock is valid for less: TTL minus the time acquisition took
// minus the drift allowance (see WithDriftFactor). Default 10 s.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithStrategy sets what Lock does when the lock is held: Retry (default
// Retry(3, 100ms)) or Reject.
func WithStrategy(s Strategy) Option { return func(c *config) { c.strategy = s } }

// WithDriftFactor sets the clock-drift allowance as a fraction of the TTL,
// in [0, 1). The validity of a lock is shortened by TTL·factor + 2 ms to
// cover the nodes' clocks running faster than ours. Default 0.01.
func WithDriftFactor(f float64) Option { return func(c *config) { c.driftFactor = f } }

// WithNodeTimeout bounds every call to one node: acquire, extend and
// release. It must be much smaller than the TTL so a dead or paused node
// cannot eat the validity, and it must be below the validity (TTL minus
// the drift allowance), or a round that took the whole timeout could
// never grant: such a configuration is ErrInvalid, as is d <= 0. Default
// TTL/10, at most one second.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		c.nodeTimeout = d
		if d == 0 {
			c.nodeTimeout = -1 // an explicit zero is invalid, not "default"
		}
	}
}

// withRenewEvery sets how often the heartbeat extends the lock, instead
// of TTL/3 (tests: a short interval over a long TTL). d must be positive,
// and d plus the node timeout must be shorter than the validity.
func withRenewEvery(d time.Duration) Option {
	return func(c *config) {
		c.renewEvery = d
		if d == 0 {
			c.renewEvery = -1 // an explicit zero is invalid, not "default"
		}
	}
}

// WithAutoRenew makes Lock start the heartbeat that Do uses: the lock is
// extended by the TTL every third of the TTL until Unlock,
// and Lost is closed when an extension fails or validity runs out first.
// The heartbeat runs in its own goroutine, which only Unlock or the loss
// ends: a Lock taken with WithAutoRenew must be unlocked. Do renews
// whether or not this option is given.
func WithAutoRenew() Option { return func(c *config) { c.autoRenew = true } }

// WithFencing makes every acquisition issue a fencing token,
// (*Lock).Fence, strictly greater than every earlier holder's of the same
// key, for the protected resource to refuse writes from a stale holder (one
// that paused past its validity). Each node keeps a counter per key, key +
// ":fence", that expires when unused for the fence lifetime
// (WithFenceLifetime). Tokens are integers below 2^53. Over N nodes the
// token takes a second round on the nodes whose counter is behind.
// docs/fencing.md has the scheme, the proof that tokens strictly increase
// while counters live, and what it rests on when a counter is lost
// (expired, evicted, flushed): the nodes' clocks.
func WithFencing() Option { return func(c *config) { c.fencing = true } }

// WithFenceLifetime sets how long a key's fence counter lives on each node
// after its last use (WithFencing): a name locked once costs one counter
// key per node (about 130 bytes for a short key) for that long. A token issued after the
// counter expired starts from the node's clock, still above every earlier
// token while the nodes' clocks agree within the lifetime. d must be at
// least the TTL, or a counter could expire under its holder; otherwise
// ErrInvalid. Default 24 hours.
func WithFenceLifetime(d time.Duration) Option { return func(c *config) { c.fenceLife = d } }

// WithHandoff switches release notifications on (the default) or off.
// With them on, a waiter under the Retry strategy whose nodes support
// them (see driver.Subscriber; both adapters' nodes do) retries as soon as the
// holder releases instead of sleeping out its backoff delay, and the
// waiters of one locker for a key stand in line in arrival order (a new
// call joins the line instead of barging in, and a release wakes the
// first; see line.go). Switching them off is for measuring the
// difference and for servers where PUBLISH/SUBSCRIBE is disabled: releases
// then publish nothing.
func WithHandoff(on bool) Option { return func(c *config) { c.noHandoff = !on } }

// WithObserver sets the Observer told about every lock operation.
// Default none: nothing is reported or logged. Given to one call, nil
// silences the locker's observer for that call.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// withTokenSuffix makes every attempt's token the random part followed by
// suffix: a campaign stores its value there, for readers of the key
// (election.go). Unexported: a suffix is not random, and only the
// election knows how to read it back.
func withTokenSuffix(suffix string) Option { return func(c *config) { c.tokenSuffix = suffix } }

// renewInterval is the heartbeat period.
func (c *config) renewInterval() time.Duration {
	if c.renewEvery > 0 {
		return c.renewEvery
	}
	return c.ttl / 3
}

// validateRenewal checks that the heartbeat fits in the validity: an
// extension starts one renew interval after the last one ended and may
// take a node timeout, and must be done before the validity (TTL minus
// drift) runs out. Called when a heartbeat is about to start, since only
// then does the default interval matter.
func (c *config) validateRenewal() error {
	every, valid, timeout := c.renewInterval(), c.ttl-c.drift(), c.timeout()
	if every >= valid-timeout {
		return invalidf("renew interval %v plus node timeout %v leaves no room within the validity %v (TTL %v minus drift)",
			every, timeout, valid, c.ttl)
	}
	return nil
}

// with returns a copy of c with opts applied.
func (c config) with(opts []Option) config {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// forCall is the configuration of one call given opts: c itself when
// there are none (a call's configuration is never written to, so the
// locker's is shared), else a copy with opts applied, made in one
// allocation where with and taking the result's address make two.
func (c *config) forCall(opts []Option) *config {
	if len(opts) == 0 {
		return c
	}
	cc := new(config)
	*cc = *c
	for _, o := range opts {
		if o != nil {
			o(cc)
		}
	}
	return cc
}

// drift is the clock-drift allowance for the configured TTL.
func (c *config) drift() time.Duration { return driftFor(c.ttl, c.driftFactor) }

// timeout is the per-node call bound.
func (c *config) timeout() time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	return min(c.ttl/10, maxNodeTimeout)
}

func (c *config) validate() error {
	if c.strategy == nil {
		return invalidf("nil strategy")
	}
	if v, ok := c.strategy.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return err
		}
	}
	if c.clock == nil {
		return invalidf("nil clock")
	}
	if math.IsNaN(c.driftFactor) || c.driftFactor < 0 || c.driftFactor >= 1 {
		return invalidf("drift factor %v outside [0, 1)", c.driftFactor)
	}
	if c.nodeTimeout < 0 {
		return invalidf("node timeout must be positive")
	}
	if c.renewEvery < 0 {
		return invalidf("renew interval must be positive")
	}
	if err := c.validateTTL(c.ttl); err != nil {
		return err
	}
	if c.fenceLife < c.ttl {
		return invalidf("fence lifetime %v is shorter than the TTL %v", c.fenceLife, c.ttl)
	}
	if c.fenceLife < time.Millisecond {
		return invalidf("fence lifetime %v is below a millisecond", c.fenceLife)
	}
	if c.renewEvery > 0 || c.autoRenew {
		return c.validateRenewal()
	}
	return nil
}

// validateTTL checks that ttl leaves some validity after the drift
// allowance and more than one node call: a round that takes the whole
// node timeout must still end with validity left.
func (c *config) validateTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("TTL %v is not positive", ttl)
	}
	if ttl < time.Millisecond {
		return invalidf("TTL %v is below Redis's one-millisecond resolution", ttl)
	}
	d := driftFor(ttl, c.driftFactor)
	if ttl <= d {
		return invalidf("TTL %v leaves no validity after the drift allowance %v", ttl, d)
	}
	if t := c.timeout(); ttl-d <= t {
		return invalidf("TTL %v minus the drift allowance %v leaves no room for the node timeout %v", ttl, d, t)
	}
	return nil
}

// eventStart reads the clock for the start of an operation whose
// Duration only an observer reads: without one it returns the zero time
// and the caller skips the event, so the clock is not read for nothing.
func (c *config) eventStart() time.Time {
	if c.observer == nil {
		return time.Time{}
	}
	return c.clock.Now()
}

// observe reports e when an observer is set.
func (c *config) observe(e Event) {
	if c.observer != nil {
		c.observer(e)
	}
}
