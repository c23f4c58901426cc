package redlock

import (
	"math"
	"time"
)

// Defaults used when an option is not given.
const (
	DefaultTTL         = 10 * time.Second
	DefaultDriftFactor = 0.01
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
	clock       Clock
	nodeTimeout time.Duration // 0: TTL/10, at most one second
}

func defaultConfig() config {
	return config{
		ttl:         DefaultTTL,
		strategy:    Retry(DefaultRetries, DefaultRetryDelay),
		driftFactor: DefaultDriftFactor,
		clock:       SystemClock{},
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

// WithClock replaces the system clock, for tests.
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// WithNodeTimeout bounds every call to one node: acquire, extend and
// release. It must be much smaller than the TTL so a dead or paused node
// cannot eat the validity. Default TTL/10, at most one second.
func WithNodeTimeout(d time.Duration) Option { return func(c *config) { c.nodeTimeout = d } }

// setup checks a locker's nodes and default options.
func setup(nodes []Backend, opts []Option) (config, error) {
	if err := checkNodes(nodes); err != nil {
		return config{}, err
	}
	cfg := defaultConfig().with(opts)
	return cfg, cfg.validate()
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
		return invalidf("negative node timeout %v", c.nodeTimeout)
	}
	return c.validateTTL(c.ttl)
}

// validateTTL checks that ttl leaves some validity after the drift
// allowance and is longer than one node call.
func (c *config) validateTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("TTL %v is not positive", ttl)
	}
	if ttl < time.Millisecond {
		return invalidf("TTL %v is below Redis's one-millisecond resolution", ttl)
	}
	if d := driftFor(ttl, c.driftFactor); ttl <= d {
		return invalidf("TTL %v leaves no validity after the drift allowance %v", ttl, d)
	}
	if c.nodeTimeout >= ttl {
		return invalidf("node timeout %v is not shorter than the TTL %v", c.nodeTimeout, ttl)
	}
	return nil
}
