package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metricsServer serves newService's routes, the API and /metrics, as
// instance "test" on a fresh SQLite database; its MeterProvider is shut
// down after the server has stopped.
func metricsServer(t *testing.T, env map[string]string, g *gateway) string {
	t.Helper()
	h, shutdown, err := newService(fromEnv(t, env), newStore(t), g.charge, "test")
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
		assert.NoError(t, shutdown(context.Background()))
	})
	return srv.URL
}

// scrape GETs /metrics and parses the text exposition.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

// counter returns the value of the counter name's series whose labels
// include want, and whether there is one.
func counter(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := families[name]
	if f == nil || f.GetType() != dto.MetricType_COUNTER {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// A contended pair of checkouts of one order (the first held inside the
// payment gateway while the second is refused with 409), then a scrape of
// /metrics: the contention counter says busy, the acquisitions counter
// says acquired once and busy once, all under the key template
// "order:{id}", and no series anywhere carries the order's id.
func TestMetricsContention(t *testing.T) {
	const id = "metrics-4711" // in no label value unless a raw key leaked
	srv := miniredis.RunT(t)
	g := newGateway()
	base := metricsServer(t, map[string]string{
		envconfig.VarEnabled: "true", envconfig.VarNodes: "redis://" + srv.Addr(), envconfig.VarStrategy: "reject",
	}, g)

	first := postAsync(t, base, id, 1500)
	require.Equal(t, id, g.waitEntered(t))
	second := post(t, base, id, 1500)
	require.Equal(t, http.StatusConflict, second.status, second.body)
	close(g.release)
	r := wait(t, first)
	require.Equal(t, http.StatusOK, r.status, r.body)

	families := scrape(t, base)
	series := func(outcome string) map[string]string {
		return map[string]string{"key": "order:{id}", "outcome": outcome}
	}
	busy, ok := counter(families, "redlock_lock_contention_total", series("busy"))
	assert.True(t, ok, `no redlock_lock_contention_total{key="order:{id}",outcome="busy"}`)
	assert.GreaterOrEqual(t, busy, 1.0, "contention")
	acquired, ok := counter(families, "redlock_lock_acquisitions_total", series("acquired"))
	assert.True(t, ok, `no redlock_lock_acquisitions_total{key="order:{id}",outcome="acquired"}`)
	assert.Equal(t, 1.0, acquired, "the first checkout acquired the lock")
	refused, ok := counter(families, "redlock_lock_acquisitions_total", series("busy"))
	assert.True(t, ok, `no redlock_lock_acquisitions_total{key="order:{id}",outcome="busy"}`)
	assert.Equal(t, 1.0, refused, "the second checkout found it busy")

	// Cardinality: the only key is the template, and the order's id is
	// in no label value of any series.
	var redlockSeries int
	for name, f := range families {
		for _, m := range f.GetMetric() {
			if strings.HasPrefix(name, "redlock_") {
				redlockSeries++
			}
			for _, l := range m.GetLabel() {
				assert.NotContains(t, l.GetValue(), id, "%s: label %s", name, l.GetName())
				if l.GetName() == "key" {
					assert.Equal(t, "order:{id}", l.GetValue(), "%s: key", name)
				}
			}
		}
	}
	assert.Positive(t, redlockSeries)
}
