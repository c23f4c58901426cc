package redlockotel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Span names.
const (
	SpanLock   = "redlock.Lock"
	SpanDo     = "redlock.Do"
	SpanExtend = "redlock.Extend"
	SpanUnlock = "redlock.Unlock"
	SpanLost   = "redlock.Lost"
)

// Span event names.
const (
	EventNodeError  = "redlock.node.error"
	EventContention = "redlock.contention"
)

// Span attribute keys.
const (
	AttrKey         = attribute.Key("redlock.key")
	AttrKeyTemplate = attribute.Key("redlock.key.template")
	AttrNodes       = attribute.Key("redlock.nodes")
	AttrQuorum      = attribute.Key("redlock.quorum")
	AttrGranted     = attribute.Key("redlock.granted")
	AttrOutcome     = attribute.Key("redlock.outcome")
	AttrAttempts    = attribute.Key("redlock.attempts")
	AttrAttempt     = attribute.Key("redlock.attempt")
	AttrFence       = attribute.Key("redlock.fence")
	AttrHold        = attribute.Key("redlock.hold.duration")
	AttrNode        = attribute.Key("redlock.node")
	AttrOp          = attribute.Key("redlock.op")
	AttrCallTime    = attribute.Key("redlock.call.duration")
	AttrError       = attribute.Key("error.message")
)

// Wrap returns a Locker that traces and measures every Lock and Do of l,
// and the Extend, Unlock and loss of every lock they return. See the
// package documentation for what is recorded. Wrapping a nil l gives a
// Locker whose every call fails with an error matching redlock.ErrInvalid.
func Wrap(l redlock.Locker, opts ...Option) redlock.Locker {
	if l == nil {
		return nilLocker{}
	}
	return &locker{l: l, t: newTelemetry(opts)}
}

type locker struct {
	l redlock.Locker
	t *telemetry
}

func (w *locker) Lock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	return w.lock(ctx, key, opts, w.l.Lock)
}

func (w *locker) RLock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	return w.lock(ctx, key, opts, w.l.RLock)
}

func (w *locker) WLock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	return w.lock(ctx, key, opts, w.l.WLock)
}

func (w *locker) LockMany(ctx context.Context, keys []string, opts ...redlock.Option) (*redlock.Lock, error) {
	return w.lock(ctx, setName(keys), opts, func(ctx context.Context, _ string, opts ...redlock.Option) (*redlock.Lock, error) {
		return w.l.LockMany(ctx, keys, opts...)
	})
}

func (w *locker) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...redlock.Option) error {
	return w.do(ctx, key, fn, opts, w.l.Do)
}

func (w *locker) DoRead(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...redlock.Option) error {
	return w.do(ctx, key, fn, opts, w.l.DoRead)
}

func (w *locker) DoWrite(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...redlock.Option) error {
	return w.do(ctx, key, fn, opts, w.l.DoWrite)
}

func (w *locker) DoMany(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...redlock.Option) error {
	return w.do(ctx, setName(keys), fn, opts, func(ctx context.Context, _ string, fn func(context.Context) error, opts ...redlock.Option) error {
		return w.l.DoMany(ctx, keys, fn, opts...)
	})
}

// setName names a set of keys in spans and metrics as the core names it
// in errors: the keys between brackets, separated by spaces.
func setName(keys []string) string { return "[" + strings.Join(keys, " ") + "]" }

// lock traces one acquisition made by take.
func (w *locker) lock(ctx context.Context, key string, opts []redlock.Option,
	take func(context.Context, string, ...redlock.Option) (*redlock.Lock, error)) (*redlock.Lock, error) {
	if ctx == nil { // refused by l: count it, there is no trace to continue
		l, err := take(ctx, key, opts...)
		w.t.invalid(key, err)
		return l, err
	}
	c, ctx := w.t.begin(ctx, SpanLock, key)
	l, err := take(ctx, key, c.options(opts)...)
	c.end(err)
	return l, err
}

// do traces one call of a Do function.
func (w *locker) do(ctx context.Context, key string, fn func(context.Context) error, opts []redlock.Option,
	hold func(context.Context, string, func(context.Context) error, ...redlock.Option) error) error {
	if ctx == nil {
		err := hold(ctx, key, fn, opts...)
		w.t.invalid(key, err)
		return err
	}
	c, ctx := w.t.begin(ctx, SpanDo, key)
	var run func(context.Context) error
	if fn != nil { // a nil fn stays nil, for l to refuse
		run = func(ctx context.Context) error {
			defer c.returned()
			return fn(ctx)
		}
	}
	err := hold(ctx, key, run, c.options(opts)...)
	c.end(err)
	return err
}

// invalid counts a call refused without a context.
func (t *telemetry) invalid(key string, err error) {
	if err != nil {
		attrs := append(t.keyAttrs(key), attrOutcome.String(outcome(err, "acquired")))
		t.acquisitions.Add(context.Background(), 1, metric.WithAttributes(attrs...))
	}
}

// call is the observer of one Lock or Do call and of the lock it returns:
// it is the call's redlock.WithObserver, so it hears about that lock and
// no other, for as long as the lock lives.
type call struct {
	t      *telemetry
	caller context.Context // the call's context, while acquiring
	ctx    context.Context // the call's span, without the caller's values or cancellation
	span   trace.Span
	base   []attribute.KeyValue // metric attributes: the key template
	attrs  []attribute.KeyValue // span attributes: key, template, nodes

	mu       sync.Mutex
	acquired bool // EventAcquire came: later node errors belong to extensions and releases
	fnEnd    time.Time
	pending  []nodeError // node errors of extensions and releases not yet finished
}

type nodeError struct {
	at time.Time
	e  redlock.Event
}

// begin starts a Lock or Do call's span.
func (t *telemetry) begin(ctx context.Context, name, key string) (*call, context.Context) {
	c := &call{t: t}
	if t.cfg.spanKeys {
		c.attrs = append(c.attrs, AttrKey.String(key))
	}
	if tk := t.template(key); tk != "" {
		c.base = []attribute.KeyValue{attrKey.String(tk)}
		c.attrs = append(c.attrs, AttrKeyTemplate.String(tk))
	}
	if t.cfg.nodes > 0 {
		c.attrs = append(c.attrs, AttrNodes.Int(t.cfg.nodes))
	}
	ctx, c.span = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(c.attrs...))
	c.caller = ctx
	c.ctx = trace.ContextWithSpan(context.Background(), c.span)
	t.waiting.Add(ctx, 1, metric.WithAttributes(c.base...))
	return c, ctx
}

// options returns the call's options with c as its observer, last, so
// that it wins over any other.
func (c *call) options(opts []redlock.Option) []redlock.Option {
	return append(slices.Clip(opts), redlock.WithObserver(c.observe))
}

// returned notes that Do's function returned: Do's release starts now.
func (c *call) returned() {
	c.mu.Lock()
	c.fnEnd = time.Now()
	c.mu.Unlock()
}

// end ends the call's span with the call's error. A call refused before
// acquiring (ErrInvalid) sent no EventAcquire: it is counted here.
func (c *call) end(err error) {
	if c.finishAcquiring() {
		o := outcome(err, "acquired")
		c.t.acquisitions.Add(c.caller, 1, metric.WithAttributes(append(c.base[:len(c.base):len(c.base)], attrOutcome.String(o))...))
		c.span.SetAttributes(AttrOutcome.String(o))
	}
	fail(c.span, err, time.Now())
	c.span.End()
}

// finishAcquiring marks the end of the acquisition, once, and reports
// whether this call did it.
func (c *call) finishAcquiring() bool {
	c.mu.Lock()
	first := !c.acquired
	c.acquired = true
	c.mu.Unlock()
	if first {
		c.t.waiting.Add(c.ctx, -1, metric.WithAttributes(c.base...))
	}
	return first
}

// observe records e: metrics for every event, and on the spans what
// belongs there.
func (c *call) observe(e redlock.Event) {
	now := time.Now()
	switch e.Kind {
	case redlock.EventAcquire:
		cancelled := c.caller.Err() != nil
		c.t.record(c.caller, e, c.base, cancelled)
		c.acquire(e, cancelled)
	case redlock.EventContention:
		c.t.record(c.caller, e, c.base, false)
		c.span.AddEvent(EventContention, trace.WithTimestamp(now), trace.WithAttributes(
			AttrAttempt.Int(e.Attempt), AttrOutcome.String(outcome(e.Err, "busy"))))
	case redlock.EventNodeError:
		c.t.record(c.ctx, e, c.base, false)
		c.nodeError(now, e)
	default:
		c.t.record(c.ctx, e, c.base, false)
		c.held(now, e)
	}
	if c.t.cfg.next != nil {
		c.t.cfg.next(e)
	}
}

// acquire sets the call span's outcome.
func (c *call) acquire(e redlock.Event, cancelled bool) {
	c.finishAcquiring()
	attrs := []attribute.KeyValue{AttrOutcome.String(acquireOutcome(e.Err, cancelled)), AttrAttempts.Int(e.Attempt)}
	if e.Fence > 0 {
		attrs = append(attrs, AttrFence.Int64(e.Fence))
	}
	c.span.SetAttributes(attrs...)
}

// nodeError puts a failing node on the span of the operation it failed:
// on the call's while acquiring, else held back for the Extend or Unlock
// span that the operation's closing event starts.
func (c *call) nodeError(now time.Time, e redlock.Event) {
	if callerCancelled(e.Err) {
		return // not the node's failure
	}
	c.mu.Lock()
	if c.acquired && (e.Op == "extend" || e.Op == "release") {
		c.pending = append(c.pending, nodeError{now, e})
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.span.AddEvent(EventNodeError, nodeErrorOptions(now, e)...)
}

func nodeErrorOptions(at time.Time, e redlock.Event) []trace.EventOption {
	attrs := []attribute.KeyValue{AttrNode.String(e.Node), AttrOp.String(e.Op), AttrCallTime.Float64(e.Duration.Seconds())}
	if e.Err != nil {
		attrs = append(attrs, AttrError.String(e.Err.Error()))
	}
	return []trace.EventOption{trace.WithTimestamp(at), trace.WithAttributes(attrs...)}
}

// held turns an extension, a release or a loss into a span, a child of
// the call's span, ending now.
func (c *call) held(now time.Time, e redlock.Event) {
	var name, op string
	start, err := now, e.Err
	attrs := slices.Clip(c.attrs)
	switch e.Kind {
	case redlock.EventExtend:
		name, op = SpanExtend, "extend"
		start = now.Add(-e.Duration)
		o := outcome(e.Err, "extended")
		if o == "cancelled" {
			err = nil // the heartbeat stopped by Unlock or Do's end: no failure
		}
		attrs = append(attrs, AttrOutcome.String(o))
	case redlock.EventRelease:
		name, op = SpanUnlock, "release"
		attrs = append(attrs, AttrOutcome.String(outcome(e.Err, "released")), AttrHold.Float64(e.Duration.Seconds()))
	case redlock.EventLost:
		name = SpanLost
		attrs = append(attrs, AttrHold.Float64(e.Duration.Seconds()))
	default:
		return
	}
	c.mu.Lock()
	if e.Kind == redlock.EventRelease && !c.fnEnd.IsZero() && c.fnEnd.Before(now) {
		start = c.fnEnd // Do's release starts when its function returns
	}
	var mine []nodeError
	if op != "" {
		c.pending = slices.DeleteFunc(c.pending, func(p nodeError) bool {
			if p.e.Op == op {
				mine = append(mine, p)
				return true
			}
			return false
		})
	}
	c.mu.Unlock()
	if len(mine) > 0 && mine[0].at.Add(-mine[0].e.Duration).Before(start) {
		start = mine[0].at.Add(-mine[0].e.Duration) // the release began at least as early as its first node call
	}
	_, span := c.t.tracer.Start(c.ctx, name, trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	for _, p := range mine {
		span.AddEvent(EventNodeError, nodeErrorOptions(p.at, p.e)...)
	}
	fail(span, err, now)
	span.End(trace.WithTimestamp(now))
}

// fail records err on span, with the quorum's numbers when it has them.
func fail(span trace.Span, err error, at time.Time) {
	if err == nil {
		return
	}
	if qe := (*redlock.QuorumError)(nil); errors.As(err, &qe) {
		span.SetAttributes(AttrNodes.Int(qe.Nodes), AttrQuorum.Int(qe.Quorum), AttrGranted.Int(qe.Granted))
	}
	span.RecordError(err, trace.WithTimestamp(at))
	span.SetStatus(codes.Error, err.Error())
}

// nilLocker is what Wrap(nil) returns: a bad argument is reported by the
// first call, as an error, rather than by a panic.
type nilLocker struct{}

var errNilLocker = fmt.Errorf("%w: redlockotel.Wrap: nil Locker", redlock.ErrInvalid)

func (nilLocker) Lock(context.Context, string, ...redlock.Option) (*redlock.Lock, error) {
	return nil, errNilLocker
}

func (nilLocker) Do(context.Context, string, func(context.Context) error, ...redlock.Option) error {
	return errNilLocker
}

func (nilLocker) RLock(context.Context, string, ...redlock.Option) (*redlock.Lock, error) {
	return nil, errNilLocker
}

func (nilLocker) WLock(context.Context, string, ...redlock.Option) (*redlock.Lock, error) {
	return nil, errNilLocker
}

func (nilLocker) LockMany(context.Context, []string, ...redlock.Option) (*redlock.Lock, error) {
	return nil, errNilLocker
}

func (nilLocker) DoRead(context.Context, string, func(context.Context) error, ...redlock.Option) error {
	return errNilLocker
}

func (nilLocker) DoWrite(context.Context, string, func(context.Context) error, ...redlock.Option) error {
	return errNilLocker
}

func (nilLocker) DoMany(context.Context, []string, func(context.Context) error, ...redlock.Option) error {
	return errNilLocker
}
