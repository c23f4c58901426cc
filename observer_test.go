package redlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/fakenode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (r *recorder) Observe(e redlock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// take returns the events so far and forgets them.
func (r *recorder) take() []redlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	es := r.events
	r.events = nil
	return es
}

func kinds(es []redlock.Event) []redlock.EventKind {
	out := make([]redlock.EventKind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

func TestObserverSeesEveryOperation(t *testing.T) {
	ms, bs := minis(t, 3)
	dead := ms[2].Addr()
	ms[2].Close()
	for _, m := range ms[:2] {
		require.NoError(t, m.Set("k", "other"))
	}
	clk := newFakeClock()
	clk.onAfter = func(int) { // the other holder lets go during our first wait
		for _, m := range ms[:2] {
			m.Del("k")
		}
	}
	rec := &recorder{}
	r, err := redlock.New(bs, redlock.WithObserver(rec.Observe), redlock.WithClock(clk), redlock.WithHandoff(false),
		redlock.WithStrategy(redlock.Retry(1, 7*time.Millisecond)))
	require.NoError(t, err)

	l, err := r.Lock(t.Context(), "k")
	require.NoError(t, err)
	es := rec.take()
	// attempt 1: the dead node fails, and again when the attempt is
	// rolled back; attempt 2 gets the lock without it.
	require.Equal(t, []redlock.EventKind{redlock.EventNodeError, redlock.EventNodeError, redlock.EventContention, redlock.EventNodeError, redlock.EventAcquire}, kinds(es))
	assert.Equal(t, dead, es[0].Node, "node errors name the node")
	assert.Equal(t, "acquire", es[0].Op)
	assert.Error(t, es[0].Err)
	assert.Equal(t, "release", es[1].Op)
	assert.Equal(t, 1, es[2].Attempt)
	assert.ErrorIs(t, es[2].Err, redlock.ErrNotAcquired, "contention: the key was held")
	assert.Equal(t, "k", es[4].Key)
	assert.Equal(t, 2, es[4].Attempt)
	assert.Equal(t, 7*time.Millisecond, es[4].Duration, "the acquisition waited one backoff delay")
	assert.NoError(t, es[4].Err)

	clk.Advance(300 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context(), 2*time.Second))
	es = rec.take()
	require.Equal(t, []redlock.EventKind{redlock.EventNodeError, redlock.EventExtend}, kinds(es))
	assert.Equal(t, "extend", es[0].Op)
	assert.NoError(t, es[1].Err)

	clk.Advance(200 * time.Millisecond)
	require.NoError(t, l.Unlock(t.Context()))
	es = rec.take()
	require.Equal(t, []redlock.EventKind{redlock.EventNodeError, redlock.EventRelease}, kinds(es))
	assert.Equal(t, "release", es[0].Op)
	assert.Equal(t, 500*time.Millisecond, es[1].Duration, "release reports how long the lock was held")

	_, err = r.Lock(t.Context(), "", redlock.WithObserver(rec.Observe))
	require.ErrorIs(t, err, redlock.ErrInvalid)
	assert.Empty(t, rec.take(), "bad input is not an operation")
}

func TestObserverFailedAcquisitionAndLoss(t *testing.T) {
	ms, bs := minis(t, 1)
	rec := &recorder{}
	s, err := redlock.NewSingle(bs[0], redlock.WithObserver(rec.Observe), redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	require.NoError(t, ms[0].Set("k", "other"))
	_, err = s.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	es := rec.take()
	require.Equal(t, []redlock.EventKind{redlock.EventContention, redlock.EventAcquire}, kinds(es))
	assert.ErrorIs(t, es[1].Err, redlock.ErrNotAcquired)
	ms[0].Del("k")

	err = s.Do(t.Context(), "k", func(ctx context.Context) error {
		ms[0].Del("k")
		<-ctx.Done()
		return nil
	}, redlock.WithTTL(2*time.Second), redlock.WithRenewEvery(5*time.Millisecond), redlock.WithFencing())
	require.ErrorIs(t, err, redlock.ErrLockLost)
	es = nil
	for _, e := range rec.take() { // on a slow machine a heartbeat may beat the Del
		if e.Kind != redlock.EventExtend || e.Err != nil {
			es = append(es, e)
		}
	}
	require.Equal(t, []redlock.EventKind{redlock.EventAcquire, redlock.EventExtend, redlock.EventLost, redlock.EventRelease}, kinds(es))
	assert.Positive(t, es[0].Fence)
	assert.ErrorIs(t, es[1].Err, redlock.ErrNotHeld)
	assert.ErrorIs(t, es[2].Err, redlock.ErrLockLost)
	assert.Positive(t, es[2].Duration)
}

func TestSlogObserver(t *testing.T) {
	ms, bs := minis(t, 1)
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := redlock.NewSingle(bs[0], redlock.WithObserver(redlock.SlogObserver(logger)), redlock.WithStrategy(redlock.Reject()), redlock.WithFencing())
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	_, err = s.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Unlock(t.Context()))
	addr := ms[0].Addr()
	ms[0].Close()
	_, err = s.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrUnavailable)

	type record struct {
		Level, Msg, Key, Node, Op, Error string
		Fence                            int64
	}
	var got []record
	for line := range bytes.Lines(buf.Bytes()) {
		var r record
		require.NoError(t, json.Unmarshal(line, &r))
		got = append(got, r)
	}
	want := []struct{ level, msg string }{
		{"DEBUG", "redlock: acquire"},
		{"DEBUG", "redlock: contention"},
		{"INFO", "redlock: acquire"}, // busy
		{"DEBUG", "redlock: release"},
		{"WARN", "redlock: node error"}, // the attempt
		{"WARN", "redlock: node error"}, // its rollback
		{"DEBUG", "redlock: contention"},
		{"WARN", "redlock: acquire"}, // unavailable
	}
	require.Len(t, got, len(want), buf.String())
	for i, w := range want {
		assert.Equal(t, w.level, got[i].Level, "record %d", i)
		assert.Equal(t, w.msg, got[i].Msg, "record %d", i)
		assert.Equal(t, "k", got[i].Key)
	}
	assert.Positive(t, got[0].Fence)
	assert.NotEmpty(t, got[2].Error)
	assert.Equal(t, addr, got[4].Node)
	assert.Equal(t, "acquire", got[4].Op)

	// A nil logger logs to slog.Default(), as it is at each event.
	var def bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&def, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(prev)
	_, fresh := minis(t, 1)
	s2, err := redlock.NewSingle(fresh[0], redlock.WithObserver(redlock.SlogObserver(nil)))
	require.NoError(t, err)
	l2, err := s2.Lock(t.Context(), "default-logger")
	require.NoError(t, err)
	require.NoError(t, l2.Unlock(t.Context()))
	assert.Contains(t, def.String(), `"key":"default-logger"`)
}

func TestNothingIsLoggedByDefault(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf) // slog.Default writes through the log package
	defer log.SetOutput(log.Default().Writer())
	ms, bs := minis(t, 1)
	s, err := redlock.NewSingle(bs[0], redlock.WithStrategy(redlock.Reject()))
	require.NoError(t, err)
	l, err := s.Lock(t.Context(), "k")
	require.NoError(t, err)
	_, err = s.Lock(t.Context(), "k")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Unlock(t.Context()))
	ms[0].Close()
	_, err = s.Lock(t.Context(), "k")
	require.Error(t, err)
	assert.Empty(t, buf.String())
}

// TestStoppedHeartbeatIsNoNodeError: Do's function returns while an
// extension is in flight; stopping the heartbeat cancels it, and that
// says nothing about the nodes, so no EventNodeError is reported.
func TestStoppedHeartbeatIsNoNodeError(t *testing.T) {
	_, bs := minis(t, 3)
	nodes, fakes := fakenode.WrapAll(bs)
	inFlight := make(chan struct{}, len(fakes))
	for _, f := range fakes {
		f.SetHook(func(ctx context.Context, c fakenode.Call) fakenode.Result {
			if c.Op != fakenode.Extend {
				return c.Send(ctx)
			}
			inFlight <- struct{}{}
			<-ctx.Done() // a node that has not answered yet
			return fakenode.Result{Err: ctx.Err()}
		})
	}
	var mu sync.Mutex
	var nodeErrors []redlock.Event
	obs := redlock.Observer(func(e redlock.Event) {
		if e.Kind == redlock.EventNodeError {
			mu.Lock()
			nodeErrors = append(nodeErrors, e)
			mu.Unlock()
		}
	})
	r, err := redlock.New(nodes, redlock.WithTTL(time.Minute), redlock.WithRenewEvery(time.Millisecond), redlock.WithObserver(obs))
	require.NoError(t, err)
	err = r.Do(t.Context(), "k", func(ctx context.Context) error {
		<-inFlight // an extension is waiting on the nodes
		return nil
	})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, nodeErrors, "a cancelled extension is not a failing node")
}
