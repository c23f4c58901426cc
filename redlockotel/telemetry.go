package redlockotel

import (
	"context"
	"errors"

	"github.com/quorumlock/redlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/quorumlock/redlock/redlockotel"

// The metric names (see the package documentation for units and
// attributes).
const (
	MetricWaitDuration = "redlock.lock.wait.duration"
	MetricHoldDuration = "redlock.lock.hold.duration"
	MetricAcquisitions = "redlock.lock.acquisitions"
	MetricContention   = "redlock.lock.contention"
	MetricExtensions   = "redlock.lock.extensions"
	MetricLost         = "redlock.lock.lost"
	MetricWaiting      = "redlock.lock.waiting"
	MetricNodeErrors   = "redlock.node.errors"
)

// Metric attribute keys. They are short because they become Prometheus
// labels; the metric names carry the "redlock." namespace.
const (
	attrOutcome = attribute.Key("outcome")
	attrKey     = attribute.Key("key")
	attrNode    = attribute.Key("node")
	attrOp      = attribute.Key("op")
)

// Bucket boundaries in seconds. An uncontended acquisition takes about a
// round trip; a contended one up to the strategy's whole backoff. Locks
// are held from milliseconds (a write) to minutes (a job under Do).
var (
	waitBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// telemetry is the instruments shared by every call of one Wrap or
// Observer.
type telemetry struct {
	cfg    config
	tracer trace.Tracer

	wait, hold   metric.Float64Histogram
	acquisitions metric.Int64Counter
	contention   metric.Int64Counter
	extensions   metric.Int64Counter
	lost         metric.Int64Counter
	nodeErrors   metric.Int64Counter
	waiting      metric.Int64UpDownCounter
}

func newTelemetry(opts []Option) *telemetry {
	cfg := newConfig(opts)
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	m := cfg.mp.Meter(ScopeName)
	t := &telemetry{cfg: cfg, tracer: cfg.tp.Tracer(ScopeName)}
	var errs []error
	hist := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	t.wait = hist(MetricWaitDuration, "Time Lock and Do took to acquire a lock or give up, retries included.", waitBuckets)
	t.hold = hist(MetricHoldDuration, "Time a lock was held, from its acquisition to the end of its release.", holdBuckets)
	t.acquisitions = counter(MetricAcquisitions, "{acquisition}", "Lock and Do calls by the outcome of their acquisition.")
	t.contention = counter(MetricContention, "{attempt}", "Attempts that did not get the lock (busy or unavailable) before the strategy was consulted.")
	t.extensions = counter(MetricExtensions, "{extension}", "Extensions, by the heartbeat or Extend, by outcome.")
	t.lost = counter(MetricLost, "{lock}", "Locks lost while held: an extension failed or validity ran out.")
	t.nodeErrors = counter(MetricNodeErrors, "{error}", "Calls to one node that failed (transport error or timeout, not a refusal).")
	var err error
	t.waiting, err = m.Int64UpDownCounter(MetricWaiting, metric.WithUnit("{call}"),
		metric.WithDescription("Lock and Do calls of wrapped lockers still acquiring."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	return t
}

// keyAttrs returns the metric attributes that name key: its template, or
// none.
func (t *telemetry) keyAttrs(key string) []attribute.KeyValue {
	if tk := t.template(key); tk != "" {
		return []attribute.KeyValue{attrKey.String(tk)}
	}
	return nil
}

// template returns key's template, or "" for none.
func (t *telemetry) template(key string) string {
	if t.cfg.template == nil {
		return ""
	}
	return t.cfg.template(key)
}

// record turns one event into measurements. base is the key attributes;
// cancelled says that the call's context had ended (see acquireOutcome).
func (t *telemetry) record(ctx context.Context, e redlock.Event, base []attribute.KeyValue, cancelled bool) {
	with := func(o string) metric.MeasurementOption {
		return metric.WithAttributes(append(base[:len(base):len(base)], attrOutcome.String(o))...)
	}
	switch e.Kind {
	case redlock.EventAcquire:
		a := with(acquireOutcome(e.Err, cancelled))
		t.wait.Record(ctx, e.Duration.Seconds(), a)
		t.acquisitions.Add(ctx, 1, a)
	case redlock.EventContention:
		t.contention.Add(ctx, 1, with(outcome(e.Err, "busy")))
	case redlock.EventExtend:
		t.extensions.Add(ctx, 1, with(outcome(e.Err, "extended")))
	case redlock.EventLost:
		t.lost.Add(ctx, 1, metric.WithAttributes(base...))
	case redlock.EventRelease:
		t.hold.Record(ctx, e.Duration.Seconds(), with(outcome(e.Err, "released")))
	case redlock.EventNodeError:
		if callerCancelled(e.Err) {
			return
		}
		t.nodeErrors.Add(ctx, 1, metric.WithAttributes(attrNode.String(e.Node), attrOp.String(e.Op)))
	}
}

// acquireOutcome is an acquisition's outcome; cancelled says that the
// caller's context had ended, which is why a failed acquisition failed
// whatever its error says (a custom cancellation cause matches none).
func acquireOutcome(err error, cancelled bool) string {
	if err != nil && cancelled {
		return "cancelled"
	}
	return outcome(err, "acquired")
}

// outcome classifies err: ok when it is nil, otherwise the sentinel it
// matches. The order matters: a cancelled wait matches ErrNotAcquired and
// the context's error, and ErrTimeout matches ErrNotAcquired.
func outcome(err error, ok string) string {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, redlock.ErrInvalid):
		return "invalid"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), cutShort(err):
		return "cancelled"
	case errors.Is(err, redlock.ErrTimeout):
		return "timeout"
	case errors.Is(err, redlock.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, redlock.ErrNotAcquired):
		return "busy"
	case errors.Is(err, redlock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, redlock.ErrLockLost):
		return "lost"
	}
	return "error"
}

// cutShort reports whether err is a round that failed because its
// caller cancelled it while nodes were still answering (a heartbeat
// stopped by Unlock or by the end of Do, a Lock whose context ended).
// The round's error matches only its sentinel (ErrUnavailable), so the
// nodes' errors are looked at.
func cutShort(err error) bool {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	for _, f := range qe.Failed {
		if callerCancelled(f.Err) {
			return true
		}
	}
	return false
}

// callerCancelled reports whether a node call's error is the caller's
// cancellation rather than the node's failure. A per-node timeout is
// context.DeadlineExceeded, and counts as the node's.
func callerCancelled(err error) bool { return errors.Is(err, context.Canceled) }

// Observer returns an Observer that records the metrics of the locks it
// is told about, and no spans: for a locker built with
// redlock.WithObserver(redlockotel.Observer(...)) instead of wrapped.
// Without Wrap there is no redlock.lock.waiting, and a call refused
// before it started acquiring (ErrInvalid) is not counted, since no event
// reports it. Options about spans are ignored; WithObserver chains as for
// Wrap.
func Observer(opts ...Option) redlock.Observer {
	t := newTelemetry(opts)
	return func(e redlock.Event) {
		t.record(context.Background(), e, t.keyAttrs(e.Key), false)
		if t.cfg.next != nil {
			t.cfg.next(e)
		}
	}
}
