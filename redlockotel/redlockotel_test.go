package redlockotel_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/quorumlock/redlock/redlockotel"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var digits = regexp.MustCompile(`[0-9]+`)

func template(key string) string { return digits.ReplaceAllString(key, "{id}") }

// One Do that waits for the holder, renews its lock while the function
// runs, and releases: the spans nest and say what happened, and the
// metrics count it.
func TestDoWaitsRenewsReleases(t *testing.T) {
	_, nodes := minis(t, 3)
	plain, err := redlock.New(nodes, redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tel := newTelemetry(t)
	seen := newEvents()
	locker := redlockotel.Wrap(plain, append(tel.options(), redlockotel.WithNodeCount(3),
		redlockotel.WithKeyTemplate(template), redlockotel.WithObserver(seen.Observe))...)

	ctx := context.Background()
	holder, err := plain.Lock(ctx, "order:1") // unwrapped: records nothing
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	// Released once the Do found the key held, before its next attempt (the
	// one right after it subscribes), so that attempt gets the lock.
	seen.onInline(redlock.EventContention, 1, func() { released <- holder.Unlock(ctx) })

	root, end := tel.tp.Tracer("test").Start(ctx, "request")
	err = locker.Do(root, "order:1", func(ctx context.Context) error {
		_, work := tel.tp.Tracer("test").Start(ctx, "work")
		defer work.End()
		seen.wait(t, redlock.EventExtend, 3) // three heartbeats
		return nil
	}, redlock.WithStrategy(redlock.Retry(5, 5*time.Second)), redlock.WithTTL(300*time.Millisecond), redlock.WithNodeTimeout(50*time.Millisecond))
	end.End()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}

	// Spans.
	request := tel.spansNamed("request")[0]
	do := tel.spansNamed(redlockotel.SpanDo)
	if len(do) != 1 {
		t.Fatalf("%d Do spans", len(do))
	}
	d := do[0]
	if d.Parent().SpanID() != request.SpanContext().SpanID() {
		t.Error("the Do span is not a child of the caller's span")
	}
	if d.SpanKind() != trace.SpanKindInternal || d.Status().Code != codes.Unset {
		t.Errorf("Do span: kind %v, status %v", d.SpanKind(), d.Status())
	}
	a := spanAttrs(d.Attributes())
	for k, v := range map[string]string{"redlock.key": "order:1", "redlock.key.template": "order:{id}",
		"redlock.nodes": "3", "redlock.outcome": "acquired", "redlock.attempts": "2"} {
		if a[k] != v {
			t.Errorf("Do span %s = %q, want %q (all: %v)", k, a[k], v, a)
		}
	}
	if _, ok := a["redlock.fence"]; ok {
		t.Error("fence attribute without WithFencing")
	}
	if ev := d.Events(); len(ev) != 1 || ev[0].Name != redlockotel.EventContention ||
		spanAttrs(ev[0].Attributes)["redlock.attempt"] != "1" || spanAttrs(ev[0].Attributes)["redlock.outcome"] != "busy" {
		t.Errorf("Do span events: %+v", ev)
	}
	work := tel.spansNamed("work")[0]
	if work.Parent().SpanID() != d.SpanContext().SpanID() {
		t.Error("the function's span is not a child of the Do span")
	}
	extends := tel.spansNamed(redlockotel.SpanExtend)
	if len(extends) < 3 {
		t.Fatalf("%d Extend spans, want at least 3", len(extends))
	}
	for _, s := range extends {
		checkChild(t, s, d)
		if spanAttrs(s.Attributes())["redlock.outcome"] == "cancelled" && s == extends[len(extends)-1] {
			continue // a heartbeat that came due as the function returned (a loaded machine), stopped by Do
		}
		if a := spanAttrs(s.Attributes()); a["redlock.outcome"] != "extended" || a["redlock.key"] != "order:1" || s.Status().Code != codes.Unset {
			t.Errorf("Extend span: %v, %v", a, s.Status())
		}
		if !s.StartTime().Before(s.EndTime()) || s.StartTime().Before(work.StartTime()) || s.EndTime().After(work.EndTime()) {
			t.Errorf("Extend span from %v to %v, outside the function (%v to %v)", s.StartTime(), s.EndTime(), work.StartTime(), work.EndTime())
		}
	}
	unlocks := tel.spansNamed(redlockotel.SpanUnlock)
	if len(unlocks) != 1 {
		t.Fatalf("%d Unlock spans", len(unlocks))
	}
	u := unlocks[0]
	checkChild(t, u, d)
	if a := spanAttrs(u.Attributes()); a["redlock.outcome"] != "released" || a["redlock.hold.duration"] == "" || u.Status().Code != codes.Unset {
		t.Errorf("Unlock span: %v, %v", a, u.Status())
	}
	if u.StartTime().Before(work.EndTime()) || u.EndTime().After(d.EndTime()) || u.StartTime().After(u.EndTime()) {
		t.Errorf("Unlock span from %v to %v; function ended %v, Do %v", u.StartTime(), u.EndTime(), work.EndTime(), d.EndTime())
	}
	if n := len(tel.spansNamed(redlockotel.SpanLost)); n != 0 {
		t.Errorf("%d Lost spans", n)
	}

	// Metrics.
	m := tel.metrics(t)
	const acquired, released_ = "key=order:{id},outcome=acquired", "key=order:{id},outcome=released"
	want := map[string]map[string]float64{
		redlockotel.MetricWaitDuration: {acquired: 1},
		redlockotel.MetricAcquisitions: {acquired: 1},
		redlockotel.MetricContention:   {"key=order:{id},outcome=busy": 1},
		redlockotel.MetricHoldDuration: {released_: 1},
		redlockotel.MetricWaiting:      {"key=order:{id}": 0},
	}
	for name, w := range want {
		if got := points(t, m[name]); !equal(got, w) {
			t.Errorf("%s: %v, want %v", name, got, w)
		}
	}
	if got := points(t, m[redlockotel.MetricExtensions]); got["key=order:{id},outcome=extended"] < 3 ||
		len(got) != 1 && (len(got) != 2 || got["key=order:{id},outcome=cancelled"] != 1) {
		t.Errorf("%s: %v, want at least 3 extended", redlockotel.MetricExtensions, got)
	}
	for _, name := range []string{redlockotel.MetricLost, redlockotel.MetricNodeErrors} {
		if _, ok := m[name]; ok {
			t.Errorf("%s recorded: %v", name, points(t, m[name]))
		}
	}
	if s := histogramSum(t, m[redlockotel.MetricHoldDuration], released_); s < 3*0.030 {
		t.Errorf("held %vs, less than three heartbeats", s)
	}
	if s := histogramSum(t, m[redlockotel.MetricWaitDuration], acquired); s <= 0 {
		t.Errorf("waited %vs", s)
	}
	if m[redlockotel.MetricWaitDuration].Unit != "s" || m[redlockotel.MetricAcquisitions].Unit != "{acquisition}" {
		t.Errorf("units %q, %q", m[redlockotel.MetricWaitDuration].Unit, m[redlockotel.MetricAcquisitions].Unit)
	}
	// The chained observer was told everything, in order.
	if got := seen.kinds(); !regexp.MustCompile(`^contention,acquire,(extend,){3,}(node error,)*(extend,)?release$`).MatchString(got) {
		t.Errorf("chained observer saw %s", got)
	}
}

func checkChild(t *testing.T, s, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("%s is not a child of %s", s.Name(), parent.Name())
	}
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A node that is down shows up on the span of each operation it failed,
// and in redlock.node.errors under its own name.
func TestNodeFailure(t *testing.T) {
	ms, nodes := minis(t, 3)
	down := nodes[2].Info().Name
	ms[2].Close()
	plain, err := redlock.New(nodes, redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tel := newTelemetry(t)
	locker := redlockotel.Wrap(plain, tel.options()...)
	ctx := context.Background()

	l, err := locker.Lock(ctx, "order:7")
	if err != nil {
		t.Fatal(err) // two of three is a quorum
	}
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	lock := tel.spansNamed(redlockotel.SpanLock)[0]
	for _, c := range []struct {
		span sdktrace.ReadOnlySpan
		op   string
	}{
		{lock, "acquire"},
		{tel.spansNamed(redlockotel.SpanExtend)[0], "extend"},
		{tel.spansNamed(redlockotel.SpanUnlock)[0], "release"},
	} {
		ev := c.span.Events()
		if len(ev) != 1 || ev[0].Name != redlockotel.EventNodeError {
			t.Errorf("%s events: %+v", c.span.Name(), ev)
			continue
		}
		a := spanAttrs(ev[0].Attributes)
		if a["redlock.node"] != down || a["redlock.op"] != c.op || a["error.message"] == "" || a["redlock.call.duration"] == "" {
			t.Errorf("%s node error event: %v", c.span.Name(), a)
		}
		if ev[0].Time.Before(c.span.StartTime()) || ev[0].Time.After(c.span.EndTime()) {
			t.Errorf("%s: event at %v outside the span (%v to %v)", c.span.Name(), ev[0].Time, c.span.StartTime(), c.span.EndTime())
		}
		if c.span.Status().Code != codes.Unset {
			t.Errorf("%s: status %v, though a quorum agreed", c.span.Name(), c.span.Status())
		}
		if c.span != lock {
			checkChild(t, c.span, lock)
		}
	}
	got := points(t, tel.metrics(t)[redlockotel.MetricNodeErrors])
	want := map[string]float64{"node=" + down + ",op=acquire": 1, "node=" + down + ",op=extend": 1, "node=" + down + ",op=release": 1}
	if !equal(got, want) {
		t.Errorf("node errors %v, want %v", got, want)
	}
}

// Every way an acquisition ends has its outcome, on the span and in the
// counters.
func TestOutcomes(t *testing.T) {
	ms, nodes := minis(t, 3)
	plain, err := redlock.New(nodes, redlock.WithTTL(time.Second), redlock.WithHandoff(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[1:] {
		defer m.Close()
	}
	tel := newTelemetry(t)
	seen := newEvents()
	locker := redlockotel.Wrap(plain, append(tel.options(), redlockotel.WithObserver(seen.Observe))...)
	ctx := context.Background()
	holder, err := plain.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)

	cases := []struct {
		name    string
		call    func() error
		outcome string
		is      error
	}{
		{"busy", func() error {
			_, err := locker.Lock(ctx, "held", redlock.WithStrategy(redlock.Reject()))
			return err
		}, "busy", redlock.ErrNotAcquired},
		{"timeout", func() error {
			return locker.Do(ctx, "held", func(context.Context) error { return nil },
				redlock.WithStrategy(redlock.Retry(2, time.Millisecond)))
		}, "timeout", redlock.ErrTimeout},
		{"cancelled", func() error {
			ctx, cancel := context.WithCancel(ctx)
			seen.on(redlock.EventContention, seen.count(redlock.EventContention)+1, cancel)
			_, err := locker.Lock(ctx, "held", redlock.WithStrategy(redlock.Retry(5, time.Minute)))
			return err
		}, "cancelled", context.Canceled},
		{"cancelled with a cause", func() error {
			ctx, cancel := context.WithCancelCause(ctx)
			shutdown := errors.New("shutting down")
			seen.on(redlock.EventContention, seen.count(redlock.EventContention)+1, func() { cancel(shutdown) })
			_, err := locker.Lock(ctx, "held", redlock.WithStrategy(redlock.Retry(5, time.Minute)))
			return err
		}, "cancelled", redlock.ErrNotAcquired},
		{"invalid key", func() error {
			_, err := locker.Lock(ctx, "")
			return err
		}, "invalid", redlock.ErrInvalid},
		{"invalid function", func() error { return locker.Do(ctx, "k", nil) }, "invalid", redlock.ErrInvalid},
		{"unavailable", func() error {
			ms[1].Close()
			ms[2].Close()
			_, err := locker.Lock(ctx, "free", redlock.WithStrategy(redlock.Retry(1, time.Millisecond)))
			return err
		}, "unavailable", redlock.ErrUnavailable},
	}
	for _, c := range cases {
		n := len(tel.spans.Ended())
		err := c.call()
		if !errors.Is(err, c.is) {
			t.Fatalf("%s: error %v, want %v", c.name, err, c.is)
		}
		spans := tel.spans.Ended()[n:]
		if len(spans) != 1 {
			t.Fatalf("%s: %d spans", c.name, len(spans))
		}
		s := spans[0]
		if o := spanAttrs(s.Attributes())["redlock.outcome"]; o != c.outcome {
			t.Errorf("%s: span outcome %q, want %q", c.name, o, c.outcome)
		}
		if s.Status().Code != codes.Error || s.Status().Description != err.Error() {
			t.Errorf("%s: span status %v", c.name, s.Status())
		}
		if ev := s.Events(); len(ev) == 0 || ev[len(ev)-1].Name != "exception" {
			t.Errorf("%s: error not recorded: %+v", c.name, ev)
		}
	}
	m := tel.metrics(t)
	want := map[string]float64{"outcome=busy": 1, "outcome=timeout": 1, "outcome=cancelled": 2, "outcome=invalid": 2, "outcome=unavailable": 1}
	if got := points(t, m[redlockotel.MetricAcquisitions]); !equal(got, want) {
		t.Errorf("acquisitions %v, want %v", got, want)
	}
	delete(want, "outcome=invalid") // refused before waiting
	if got := points(t, m[redlockotel.MetricWaitDuration]); !equal(got, want) {
		t.Errorf("wait %v, want %v", got, want)
	}
	if got := points(t, m[redlockotel.MetricWaiting]); !equal(got, map[string]float64{"": 0}) {
		t.Errorf("waiting %v", got)
	}
	c := points(t, m[redlockotel.MetricContention])
	if c["outcome=busy"] < 5 || c["outcome=unavailable"] != 2 {
		t.Errorf("contention %v", c)
	}
}

// A lock lost while held is a Lost span, a failed Extend, and counted.
func TestLost(t *testing.T) {
	ms, nodes := minis(t, 1)
	single, err := redlock.NewSingle(nodes[0], redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tel := newTelemetry(t)
	locker := redlockotel.Wrap(single, tel.options()...)
	ctx := context.Background()
	l, err := locker.Lock(ctx, "job:1", redlock.WithFencing(), redlock.WithAutoRenew(), redlock.WithTTL(150*time.Millisecond), redlock.WithNodeTimeout(30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ms[0].Del("job:1") // the node forgets the key
	select {
	case <-l.Lost():
	case <-time.After(testwait.Watchdog):
		t.Fatal("watchdog: the lock was not lost")
	}
	if err := l.Unlock(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("Unlock: %v", err)
	}
	lock := tel.spansNamed(redlockotel.SpanLock)[0]
	if a := spanAttrs(lock.Attributes()); a["redlock.outcome"] != "acquired" || a["redlock.fence"] != strconv.FormatInt(l.Fence(), 10) {
		t.Errorf("Lock span %v", a)
	}
	lost := tel.spansNamed(redlockotel.SpanLost)
	if len(lost) != 1 || lost[0].Status().Code != codes.Error {
		t.Fatalf("Lost spans %v", lost)
	}
	checkChild(t, lost[0], lock)
	var failed int
	for _, s := range tel.spansNamed(redlockotel.SpanExtend) {
		if s.Status().Code == codes.Error {
			failed++
			if o := spanAttrs(s.Attributes())["redlock.outcome"]; o != "not_held" {
				t.Errorf("failed extension outcome %q", o)
			}
		}
	}
	if failed != 1 {
		t.Errorf("%d failed Extend spans", failed)
	}
	u := tel.spansNamed(redlockotel.SpanUnlock)
	if len(u) != 1 || spanAttrs(u[0].Attributes())["redlock.outcome"] != "not_held" || u[0].Status().Code != codes.Error {
		t.Errorf("Unlock spans %v", u)
	}
	m := tel.metrics(t)
	if got := points(t, m[redlockotel.MetricLost]); !equal(got, map[string]float64{"": 1}) {
		t.Errorf("lost %v", got)
	}
	if got := points(t, m[redlockotel.MetricExtensions]); got["outcome=not_held"] != 1 {
		t.Errorf("extensions %v", got)
	}
	if got := points(t, m[redlockotel.MetricHoldDuration]); !equal(got, map[string]float64{"outcome=not_held": 1}) {
		t.Errorf("hold %v", got)
	}
}

// The observer a locker was built with is replaced by Wrap's per call, and
// told everything again through WithObserver; Observer alone records the
// metrics and no spans.
func TestObservers(t *testing.T) {
	_, nodes := minis(t, 1)
	builtWith, chained := newEvents(), newEvents()
	tel := newTelemetry(t)
	single, err := redlock.NewSingle(nodes[0], redlock.WithObserver(builtWith.Observe))
	if err != nil {
		t.Fatal(err)
	}
	locker := redlockotel.Wrap(single, append(tel.options(), redlockotel.WithObserver(chained.Observe))...)
	ctx := context.Background()
	if err := locker.Do(ctx, "k", func(context.Context) error { return nil }, redlock.WithObserver(builtWith.Observe)); err != nil {
		t.Fatal(err)
	}
	if builtWith.kinds() != "" || chained.kinds() != "acquire,release" {
		t.Errorf("locker's observer saw %q, chained %q", builtWith.kinds(), chained.kinds())
	}

	tel2 := newTelemetry(t)
	viaObserver := newEvents()
	obs := redlockotel.Observer(redlockotel.WithMeterProvider(tel2.mp), redlockotel.WithTracerProvider(tel2.tp),
		redlockotel.WithKeyTemplate(template), redlockotel.WithObserver(viaObserver.Observe))
	observed, err := redlock.NewSingle(nodes[0], redlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	if err := observed.Do(ctx, "k:1", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := observed.Lock(ctx, ""); err == nil {
		t.Fatal("empty key accepted")
	}
	if n := len(tel2.spans.Ended()); n != 0 {
		t.Errorf("Observer made %d spans", n)
	}
	m := tel2.metrics(t)
	if got := points(t, m[redlockotel.MetricAcquisitions]); !equal(got, map[string]float64{"key=k:{id},outcome=acquired": 1}) {
		t.Errorf("acquisitions %v", got)
	}
	if got := points(t, m[redlockotel.MetricHoldDuration]); !equal(got, map[string]float64{"key=k:{id},outcome=released": 1}) {
		t.Errorf("hold %v", got)
	}
	if _, ok := m[redlockotel.MetricWaiting]; ok {
		t.Error("Observer recorded waiting calls")
	}
	if viaObserver.kinds() != "acquire,release" {
		t.Errorf("chained %q", viaObserver.kinds())
	}
}

// 10,000 distinct keys make no more time series than the outcomes do:
// none with their keys as they are, and one per outcome and template with
// a template.
//
// Only the keys ending in 000 reach the server (to be found held once);
// the node answers the others itself: what this measures is the
// telemetry, and miniredis under the race detector would take most of the
// time.
func TestCardinality(t *testing.T) {
	_, nodes := minis(t, 1)
	node := fakenode.Wrap(nodes[0])
	node.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		if strings.HasSuffix(c.Key, "000") {
			return c.Send(ctx)
		}
		return fakenode.Result{Reply: int64(1)}
	})
	single, err := redlock.NewSingle(fakenode.Silent(node), redlock.WithStrategy(redlock.Reject()))
	if err != nil {
		t.Fatal(err)
	}
	templated := newTelemetry(t, sdktrace.WithSampler(sdktrace.NeverSample()))
	raw := newTelemetry(t)
	locker := redlockotel.Wrap(single, append(templated.options(), redlockotel.WithKeyTemplate(template),
		redlockotel.WithObserver(redlockotel.Observer(raw.options()...)))...)
	ctx := context.Background()
	const keys = 10_000
	start := time.Now()
	for i := range keys {
		key := "order:" + strconv.Itoa(i)
		l, err := locker.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(key, "000") { // some contention too
			if _, err := locker.Lock(ctx, key); !errors.Is(err, redlock.ErrNotAcquired) {
				t.Fatal(err)
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d locks in %v", keys, time.Since(start))
	for _, c := range []struct {
		tel  *telemetry
		want map[string]int
	}{
		{templated, map[string]int{
			redlockotel.MetricAcquisitions: 2, redlockotel.MetricWaitDuration: 2, redlockotel.MetricContention: 1,
			redlockotel.MetricHoldDuration: 1, redlockotel.MetricWaiting: 1,
		}},
		{raw, map[string]int{
			redlockotel.MetricAcquisitions: 2, redlockotel.MetricWaitDuration: 2, redlockotel.MetricContention: 1,
			redlockotel.MetricHoldDuration: 1,
		}},
	} {
		m := c.tel.metrics(t)
		if len(m) != len(c.want) {
			t.Errorf("metrics %v", m)
		}
		var total float64
		for name, n := range c.want {
			p := points(t, m[name])
			if len(p) != n {
				t.Errorf("%s: %d attribute sets, want %d: %v", name, len(p), n, p)
			}
			for set, v := range p {
				if digits.MatchString(set) {
					t.Errorf("%s: a raw key in %q", name, set)
				}
				if name == redlockotel.MetricAcquisitions {
					total += v
				}
			}
		}
		if total != keys+keys/1000-1 {
			t.Errorf("%v acquisitions counted", total)
		}
	}
}

// A heartbeat stopped while it extends (Do's function returned) is
// reported by the core as a failed extension (and, since the caller
// cancelled the call, with no node error); it is neither a failure of the
// lock nor of a node.
func TestHeartbeatStoppedWhileExtending(t *testing.T) {
	_, nodes := minis(t, 1)
	node := fakenode.Wrap(nodes[0])
	started := make(chan struct{}, 1)
	node.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
		if c.Op != fakenode.Extend {
			return c.Send(ctx)
		}
		started <- struct{}{}
		<-ctx.Done() // hangs until the heartbeat gives up on it
		return fakenode.Result{Err: ctx.Err()}
	})
	single, err := redlock.NewSingle(node, redlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tel := newTelemetry(t)
	seen := newEvents()
	locker := redlockotel.Wrap(single, append(tel.options(), redlockotel.WithObserver(seen.Observe))...)
	err = locker.Do(context.Background(), "k", func(ctx context.Context) error {
		<-started // an extension is in flight
		return nil
	}, redlock.WithTTL(90*time.Millisecond), redlock.WithNodeTimeout(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := seen.kinds(); got != "acquire,extend,release" {
		t.Fatalf("the core reported %s", got) // what this test is about
	}
	ext := tel.spansNamed(redlockotel.SpanExtend)
	if len(ext) != 1 || ext[0].Status().Code != codes.Unset || len(ext[0].Events()) != 0 ||
		spanAttrs(ext[0].Attributes())["redlock.outcome"] != "cancelled" {
		t.Errorf("Extend span %+v", ext)
	}
	if do := tel.spansNamed(redlockotel.SpanDo)[0]; do.Status().Code != codes.Unset || len(do.Events()) != 0 {
		t.Errorf("Do span %v, %+v", do.Status(), do.Events())
	}
	m := tel.metrics(t)
	if _, ok := m[redlockotel.MetricNodeErrors]; ok {
		t.Errorf("node errors %v", points(t, m[redlockotel.MetricNodeErrors]))
	}
	if got := points(t, m[redlockotel.MetricExtensions]); !equal(got, map[string]float64{"outcome=cancelled": 1}) {
		t.Errorf("extensions %v", got)
	}
}

// globalSet says that TestGlobalProviders set the global providers once
// already (with -count): only the first ones are delegated to.
var globalSet atomic.Bool

// Without providers, Wrap uses the global ones, including those set after
// it was called.
func TestGlobalProviders(t *testing.T) {
	tel := newTelemetry(t)
	setGlobal := func() {
		otel.SetTracerProvider(tel.tp)
		otel.SetMeterProvider(tel.mp)
	}
	var locker redlock.Locker
	if globalSet.Swap(true) { // set before Wrap
		setGlobal()
		locker = redlockotel.Wrap(single(t))
	} else { // set after Wrap: the global providers delegate
		locker = redlockotel.Wrap(single(t))
		setGlobal()
	}
	if err := locker.Do(context.Background(), "k", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(tel.spansNamed(redlockotel.SpanDo)); n != 1 {
		t.Errorf("%d Do spans", n)
	}
	if got := points(t, tel.metrics(t)[redlockotel.MetricAcquisitions]); !equal(got, map[string]float64{"outcome=acquired": 1}) {
		t.Errorf("acquisitions %v", got)
	}
}

// single is a Single on a miniredis.
func single(t *testing.T) *redlock.Redlock {
	_, nodes := minis(t, 1)
	s, err := redlock.NewSingle(nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A nil context is the wrapped locker's to refuse, and is counted; a nil
// Locker is refused at once.
func TestNilArguments(t *testing.T) {
	tel := newTelemetry(t)
	locker := redlockotel.Wrap(single(t), tel.options()...)
	var nilCtx context.Context
	if _, err := locker.Lock(nilCtx, "k"); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Lock: %v", err)
	}
	if err := locker.Do(nilCtx, "k", func(context.Context) error { return nil }); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Do: %v", err)
	}
	if got := points(t, tel.metrics(t)[redlockotel.MetricAcquisitions]); !equal(got, map[string]float64{"outcome=invalid": 2}) {
		t.Errorf("acquisitions %v", got)
	}
	nilWrapped := redlockotel.Wrap(nil)
	if _, err := nilWrapped.Lock(t.Context(), "k"); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Wrap(nil).Lock: %v", err)
	}
	if err := nilWrapped.Do(t.Context(), "k", func(context.Context) error { return nil }); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("Wrap(nil).Do: %v", err)
	}
}
