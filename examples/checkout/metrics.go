package main

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redlockotel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// orderTemplate is the key template of the lock metrics: every lock this
// service takes is an order's (rf:lock:checkout:order:{id}:write), and
// the metrics name them all "order:{id}", never by the order's id, which
// would make a time series per order.
func orderTemplate(string) string { return "order:{id}" }

// newService returns the service's routes (newHandler's) with the lock
// metrics beside them:
//
//	GET /metrics  the locker's metrics (redlockotel), Prometheus text format
//
// The locker is wrapped with redlockotel: its acquisitions, contention,
// wait and hold times, extensions and losses become OpenTelemetry metrics
// (see the redlockotel package documentation for the list), which an
// OpenTelemetry Prometheus exporter serves on /metrics from a registry of
// their own. Traces stay on the global OpenTelemetry tracer provider,
// which this service leaves as it is, a no-op: it has no trace exporter.
//
// The locker the service is given has no observer of its own (envconfig
// sets none), so nothing is lost when Wrap gives every call its own; a
// locker built with redlock.WithObserver(x) would need
// redlockotel.WithObserver(x) here too.
//
// shutdown stops the metrics' MeterProvider; call it once the server has
// stopped.
func newService(locker redlock.Locker, st *store, charge chargeFunc, instance string) (
	mux *http.ServeMux, shutdown func(context.Context) error, err error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	locker = redlockotel.Wrap(locker, redlockotel.WithMeterProvider(mp),
		redlockotel.WithKeyTemplate(orderTemplate))
	if mux, err = newHandler(locker, st, charge, instance); err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, nil, err
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, mp.Shutdown, nil
}
