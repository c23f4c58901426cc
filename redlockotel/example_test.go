package redlockotel_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/driver"
	"github.com/quorumlock/redlock/goredis"
	"github.com/quorumlock/redlock/redlockotel"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A locker wrapped with the application's tracer and meter providers
// (here the SDK's, recording in memory; a service has exporters behind
// them), with keys mapped to a template for the metrics.
func Example() {
	srv := miniredis.NewMiniRedis() // stands in for a real Redis master
	if err := srv.Start(); err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	node, err := goredis.New(c)
	if err != nil {
		log.Fatal(err)
	}
	single, err := redlock.NewSingle(node)
	if err != nil {
		log.Fatal(err)
	}

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	var locker redlock.Locker = single
	locker = redlockotel.Wrap(locker, redlockotel.WithTracerProvider(tp), redlockotel.WithMeterProvider(mp),
		redlockotel.WithKeyTemplate(func(key string) string {
			kind, _, _ := strings.Cut(key, ":")
			return kind + ":{id}" // "order:1234" → "order:{id}"
		}))

	ctx := context.Background()
	err = locker.Do(ctx, "order:1234", func(ctx context.Context) error {
		return nil // charge the order
	})
	fmt.Println("Do:", err)

	for _, s := range spans.Ended() {
		var attrs []string
		for _, kv := range s.Attributes() {
			if kv.Key != "redlock.hold.duration" {
				attrs = append(attrs, string(kv.Key)+"="+kv.Value.Emit())
			}
		}
		fmt.Println("span", s.Name(), attrs)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		lines = append(lines, fmt.Sprintf("metric %s (%s)", m.Name, m.Unit))
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// Do: <nil>
	// span redlock.Unlock [redlock.key=order:1234 redlock.key.template=order:{id} redlock.outcome=released]
	// span redlock.Do [redlock.key=order:1234 redlock.key.template=order:{id} redlock.outcome=acquired redlock.attempts=1]
	// metric redlock.lock.acquisitions ({acquisition})
	// metric redlock.lock.hold.duration (s)
	// metric redlock.lock.wait.duration (s)
	// metric redlock.lock.waiting ({call})
}

// Metrics only, without wrapping: the locker's observer.
func ExampleObserver() {
	var nodes []driver.Node // the masters, made by goredis.New
	locker, err := redlock.New(nodes, redlock.WithObserver(redlockotel.Observer(
		redlockotel.WithKeyTemplate(func(key string) string { return "job" }),
	)))
	_, _ = locker, err
}

// A locker that logged through its own observer keeps logging once
// wrapped: the observer moves from the locker to Wrap, which chains it.
func ExampleWithObserver() {
	var nodes []driver.Node // the masters, made by goredis.New
	logs := redlock.SlogObserver(slog.Default())
	locker, err := redlock.New(nodes) // was: redlock.New(nodes, redlock.WithObserver(logs))
	if err != nil {
		log.Fatal(err)
	}
	wrapped := redlockotel.Wrap(locker, redlockotel.WithObserver(logs))
	_ = wrapped
}
