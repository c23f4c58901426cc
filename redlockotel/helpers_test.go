package redlockotel_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
	"github.com/quorumlock/redlock/redlockotel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests close nodes on purpose; go-redis would log every failed
	// dial to stderr.
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// minis starts n miniredis servers and returns them with a go-redis node
// each; everything is closed when the test ends.
func minis(t testing.TB, n int) ([]*miniredis.Miniredis, []driver.Node) {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	bs := make([]driver.Node, n)
	for i := range ms {
		ms[i] = miniredis.RunT(t)
		b, err := goredis.New(redistest.Client(t, ms[i].Addr()))
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
	}
	return ms, bs
}

// telemetry is an SDK tracer and meter provider recording in memory.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t testing.TB, topts ...sdktrace.TracerProviderOption) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(append(topts, sdktrace.WithSpanProcessor(tel.spans))...)
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

func (tel *telemetry) options() []redlockotel.Option {
	return []redlockotel.Option{redlockotel.WithTracerProvider(tel.tp), redlockotel.WithMeterProvider(tel.mp)}
}

// metrics collects what the meter provider has, by metric name.
func (tel *telemetry) metrics(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != redlockotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// spansNamed returns the ended spans called name, in the order they ended.
func (tel *telemetry) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs renders a set as "k=v,k=v", sorted, for comparisons.
func attrs(set attribute.Set) string {
	var parts []string
	for _, kv := range set.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// spanAttrs is a span's attributes by key, rendered.
func spanAttrs(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// points returns a metric's points as attributes → value: the sum of a
// counter or up-down counter, the count of a histogram.
func points(t testing.TB, m metricdata.Metrics) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = float64(p.Count)
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return out
}

// histogramSum returns the sum of a histogram's point with the given
// attributes.
func histogramSum(t testing.TB, m metricdata.Metrics, want string) float64 {
	t.Helper()
	for _, p := range m.Data.(metricdata.Histogram[float64]).DataPoints {
		if attrs(p.Attributes) == want {
			return p.Sum
		}
	}
	t.Fatalf("%s: no point %s", m.Name, want)
	return 0
}

// events records the events a chained observer receives.
type events struct {
	mu       sync.Mutex
	all      []redlock.Event
	triggers []trigger
}

type trigger struct {
	kind   redlock.EventKind
	n      int
	f      func()
	inline bool // f runs on the observing goroutine, which waits for it
}

func newEvents() *events { return &events{} }

func (e *events) Observe(ev redlock.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	n := e.countLocked(ev.Kind)
	var inline []func()
	for _, tr := range e.triggers {
		if tr.kind == ev.Kind && tr.n == n {
			if tr.inline {
				inline = append(inline, tr.f)
			} else {
				go tr.f()
			}
		}
	}
	e.mu.Unlock()
	for _, f := range inline {
		f()
	}
}

// onInline runs f on the observing goroutine when the n-th event of kind
// arrives: the operation that reported it goes on only once f returns.
func (e *events) onInline(kind redlock.EventKind, n int, f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.triggers = append(e.triggers, trigger{kind: kind, n: n, f: f, inline: true})
}

// on runs f on a goroutine of its own once the n-th event of kind (from
// the start) has arrived.
func (e *events) on(kind redlock.EventKind, n int, f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.countLocked(kind) >= n {
		go f()
		return
	}
	e.triggers = append(e.triggers, trigger{kind: kind, n: n, f: f})
}

// wait returns once n events of kind have arrived (from the start), or
// fails the test.
func (e *events) wait(t testing.TB, kind redlock.EventKind, n int) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("%d %v events", n, kind), func() bool { return e.count(kind) >= n })
}

func (e *events) count(kind redlock.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.countLocked(kind)
}

func (e *events) countLocked(kind redlock.EventKind) int {
	n := 0
	for _, ev := range e.all {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func (e *events) kinds() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s []string
	for _, ev := range e.all {
		s = append(s, fmt.Sprint(ev.Kind))
	}
	return strings.Join(s, ",")
}
