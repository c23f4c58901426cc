package redlockotel

import (
	"github.com/quorumlock/redlock"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures Wrap or Observer.
type Option func(*config)

type config struct {
	tp       trace.TracerProvider
	mp       metric.MeterProvider
	template func(key string) string
	spanKeys bool
	next     redlock.Observer
	nodes    int
}

func newConfig(opts []Option) config {
	c := config{spanKeys: true}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithTracerProvider sets where spans go. Default (or nil): the global
// provider, otel.GetTracerProvider(), as it is when Wrap is called (the
// global provider delegates to one set later with otel.SetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets where metrics go. Default (or nil): the global
// provider, otel.GetMeterProvider(), with the same late binding as
// WithTracerProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithKeyTemplate maps a lock key to a template of bounded cardinality,
// for example "order:1234" to "order:{id}". The template becomes the
// metric attribute "key" and the span attribute "redlock.key.template".
// Without a template, metrics carry no key at all: a key per order would
// make a time series per order. A template that returns "" leaves the
// attribute out for that key. f must be safe for concurrent use and quick;
// it is called once per Lock or Do call (per event for Observer).
func WithKeyTemplate(f func(key string) string) Option {
	return func(c *config) { c.template = f }
}

// WithSpanKeys says whether spans carry the raw key as "redlock.key"
// (default true). Traces are sampled and indexed per trace, where a key
// per order is what one searches for; switch it off when keys hold data
// that must not leave the process, and rely on WithKeyTemplate instead.
// Metrics never carry raw keys.
func WithSpanKeys(on bool) Option {
	return func(c *config) { c.spanKeys = on }
}

// WithObserver chains o: it receives every event after the telemetry has
// recorded it, on the same goroutine.
//
// Wrap needs it for an observer the wrapped locker was built with
// (redlock.New(nodes, redlock.WithObserver(x))): Wrap gives every call
// its own redlock.WithObserver, and a call's option replaces the
// locker's, so x would no longer be told anything. Pass it here as well,
// Wrap(locker, redlockotel.WithObserver(x)), and it receives everything
// it did before. The same holds for a redlock.WithObserver passed to a
// single call of the wrapped locker: it is overridden.
func WithObserver(o redlock.Observer) Option {
	return func(c *config) { c.next = o }
}

// WithNodeCount sets the span attribute "redlock.nodes" for a Redlock of
// n nodes. A Locker does not tell how many nodes it has: Wrap knows it
// for a locker of one node (1), and otherwise a failed round tells it (from
// its *redlock.QuorumError); this option fills it in for every span, for
// example Wrap(locker, WithNodeCount(len(cfg.Nodes))) with envconfig.
func WithNodeCount(n int) Option {
	return func(c *config) { c.nodes = n }
}
