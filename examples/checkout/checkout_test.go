package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/httplock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { removeBinary() }))
}

// watchdog bounds every wait: a hang fails the test after it, it is not a
// claim about speed.
const watchdog = 20 * time.Second

// fromEnv builds the locker the way the service does, from
// LOCK_DISTRIBUTED_* variables (here a map, not the process environment).
func fromEnv(t *testing.T, env map[string]string) redlock.Locker {
	t.Helper()
	cfg, err := envconfig.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	l, closer, err := cfg.Open()
	require.NoError(t, err)
	t.Cleanup(func() { closer.Close() })
	return l
}

// gateway is a payment gateway the test controls: each charge reports its
// order on entered and waits until release is closed.
type gateway struct {
	entered chan string
	release chan struct{}
	mu      sync.Mutex
	charges map[string]int
}

func newGateway() *gateway {
	return &gateway{entered: make(chan string, 8), release: make(chan struct{}), charges: map[string]int{}}
}

func (g *gateway) charge(ctx context.Context, id string, amount int64) error {
	g.entered <- id
	select {
	case <-g.release:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.charges[id]++
	return nil
}

// charged returns a copy of the charges made so far.
func (g *gateway) charged() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]int, len(g.charges))
	for k, v := range g.charges {
		out[k] = v
	}
	return out
}

func (g *gateway) waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(watchdog):
		t.Fatal("no charge started")
		return ""
	}
}

type result struct {
	status int
	body   map[string]any
	ctype  string
}

func post(t *testing.T, base, order string, amount int) result {
	ctx, cancel := context.WithTimeout(t.Context(), watchdog)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders/"+order+"/checkout",
		strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount)))
	if err != nil {
		return result{status: -1}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{status: -1, body: map[string]any{"transport": err.Error()}}
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return result{status: resp.StatusCode, body: body, ctype: resp.Header.Get("Content-Type")}
}

func postAsync(t *testing.T, base, order string, amount int) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- post(t, base, order, amount) }()
	return ch
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(watchdog):
		t.Fatal("request never finished")
		return result{}
	}
}

// newStore opens a fresh SQLite database for the test.
func newStore(t *testing.T) *store {
	t.Helper()
	return openTestStore(t, "sqlite:"+filepath.Join(t.TempDir(), "checkout.db"))
}

func openTestStore(t testing.TB, dsn string) *store {
	t.Helper()
	st, err := openStore(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// server serves the checkout routes as instance "test" on a fresh SQLite
// database.
func server(t *testing.T, locker redlock.Locker, g *gateway) string {
	t.Helper()
	return serverOn(t, locker, g, newStore(t), "test")
}

func serverOn(t *testing.T, locker redlock.Locker, g *gateway, st *store, instance string) string {
	t.Helper()
	h, err := newHandler(locker, st, g.charge, instance)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		http.DefaultClient.CloseIdleConnections()
	})
	return srv.URL
}

// nodes are the lock backends the example is tested on.
func nodes(t *testing.T) map[string]func(t *testing.T) string {
	urls := func(addrs []string) string {
		for i := range addrs {
			addrs[i] = "redis://" + addrs[i]
		}
		return strings.Join(addrs, ",")
	}
	return map[string]func(t *testing.T) string{
		"miniredis": func(t *testing.T) string { return urls([]string{miniredis.RunT(t).Addr()}) },
		"real N=3":  func(t *testing.T) string { return urls(redistest.Start(t, 3).Addrs()) },
	}
}

// Two checkouts of one order overlap by construction (the first is held
// inside the payment gateway until the second has its answer): one 200
// and one 409, and the order is charged once. A later checkout finds it
// paid and charges nothing.
func TestCheckoutSameOrderOnce(t *testing.T) {
	for _, strategy := range []string{"reject", "retry"} {
		for name, mk := range nodes(t) {
			t.Run(strategy+"/"+name, func(t *testing.T) {
				locker := fromEnv(t, map[string]string{
					envconfig.VarEnabled: "true", envconfig.VarNodes: mk(t),
					envconfig.VarStrategy: strategy, envconfig.VarRetry: "2", envconfig.VarRetryDelay: "5",
				})
				g := newGateway()
				st := newStore(t)
				base := serverOn(t, locker, g, st, "test")

				first := postAsync(t, base, "1234", 1500)
				require.Equal(t, "1234", g.waitEntered(t))
				second := post(t, base, "1234", 1500)
				assert.Equal(t, http.StatusConflict, second.status)
				assert.Equal(t, "application/json", second.ctype)
				assert.NotEmpty(t, second.body["error"])

				close(g.release)
				r := wait(t, first)
				assert.Equal(t, http.StatusOK, r.status)
				assert.Equal(t, "success", r.body["status"])

				third := post(t, base, "1234", 1500)
				assert.Equal(t, http.StatusOK, third.status)
				assert.Equal(t, "already_paid", third.body["status"])
				assert.Equal(t, map[string]int{"1234": 1}, g.charged(), "charged exactly once")
				o, ok, err := st.get(t.Context(), "1234")
				require.NoError(t, err)
				assert.True(t, ok)
				assert.Equal(t, order{ID: "1234", Amount: 1500, ChargedBy: "test", Fence: o.Fence}, o)
				assert.Positive(t, o.Fence)
				assert.Empty(t, audit(t, st), "the audit query finds nothing wrong")
			})
		}
	}
}

// Checkouts of two different orders are both inside the gateway at once
// (the test waits for both before letting either finish), and both
// succeed.
func TestCheckoutDifferentOrdersInParallel(t *testing.T) {
	for name, mk := range nodes(t) {
		t.Run(name, func(t *testing.T) {
			locker := fromEnv(t, map[string]string{
				envconfig.VarEnabled: "true", envconfig.VarNodes: mk(t), envconfig.VarStrategy: "reject",
			})
			g := newGateway()
			base := server(t, locker, g)
			a := postAsync(t, base, "A-1", 100)
			b := postAsync(t, base, "B-2", 200)
			assert.ElementsMatch(t, []string{"A-1", "B-2"}, []string{g.waitEntered(t), g.waitEntered(t)})
			close(g.release)
			assert.Equal(t, http.StatusOK, wait(t, a).status)
			assert.Equal(t, http.StatusOK, wait(t, b).status)
			assert.Equal(t, map[string]int{"A-1": 1, "B-2": 1}, g.charged())
		})
	}
}

// With the lock service down, a checkout is refused with 500 and nothing
// is charged.
func TestCheckoutLockServiceDown(t *testing.T) {
	srv := miniredis.RunT(t)
	locker := fromEnv(t, map[string]string{
		envconfig.VarEnabled: "true", envconfig.VarNodes: "redis://" + srv.Addr(), envconfig.VarStrategy: "reject",
	})
	g := newGateway()
	base := server(t, locker, g)
	srv.Close()
	r := post(t, base, "1234", 1500)
	assert.Equal(t, http.StatusInternalServerError, r.status)
	assert.Equal(t, "application/json", r.ctype)
	assert.Empty(t, g.charged())
}

func TestCheckoutBadInput(t *testing.T) {
	g := newGateway()
	base := server(t, fromEnv(t, nil), g)
	assert.Equal(t, http.StatusUnprocessableEntity, post(t, base, "1", 0).status)
	assert.Equal(t, http.StatusBadRequest, post(t, base, "a:b", 1).status, "an order id that cannot be a lock key")
	assert.Empty(t, g.charged())
}

// The command itself: flags, a .env file with the environment winning
// over it, serving, and a clean shutdown when its context ends.
func TestRun(t *testing.T) {
	srv := miniredis.RunT(t)
	dir := t.TempDir()
	envFile := filepath.Join(dir, "checkout.env")
	require.NoError(t, os.WriteFile(envFile, []byte(
		"LOCK_DISTRIBUTED_ENABLED=true\nLOCK_DISTRIBUTED_STRATEGY=retry\nLOCK_DISTRIBUTED_NODES=redis://"+srv.Addr()+"\n"), 0o600))
	t.Setenv(envconfig.VarStrategy, "reject") // the environment wins over the file
	t.Setenv(envconfig.VarEnabled, "")        // empty: the file decides

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logs bytes.Buffer
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-env", envFile, "-db", filepath.Join(dir, "checkout.db"),
			"-instance", "run-1"}, &logs, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(watchdog):
		t.Fatal("never listening")
	}

	// An order locked from outside is refused at once: enabled (file), reject (environment).
	key, err := httplock.KeySpace{}.Write(project, "order", "77")
	require.NoError(t, err)
	srv.Set(key, "someone else")
	r := post(t, "http://"+addr, "77", 1)
	assert.Equal(t, http.StatusConflict, r.status)

	ctx2, cancel2 := context.WithTimeout(t.Context(), watchdog)
	defer cancel2()
	req, _ := http.NewRequestWithContext(ctx2, http.MethodGet, "http://"+addr+"/orders/77", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"order_id":"77","paid":false,"amount":0,"charged_by":"","fence":0}`, string(body))
	busy, _ := counter(scrape(t, "http://"+addr), "redlock_lock_acquisitions_total",
		map[string]string{"key": "order:{id}", "outcome": "busy"})
	assert.Equal(t, 1.0, busy, "run serves the lock metrics on /metrics")
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(watchdog):
		t.Fatal("run did not stop")
	}
	assert.Contains(t, logs.String(), "strategy reject")
	assert.Contains(t, logs.String(), "database: sqlite")
	assert.Contains(t, logs.String(), "checkout run-1: ")

	assert.Error(t, run(t.Context(), []string{"-env", filepath.Join(dir, "bad.env"), "-addr", "x", "-db", filepath.Join(dir, "checkout.db")},
		io.Discard, nil), "a missing .env file is skipped, so the bad address is what fails")
	assert.ErrorContains(t, run(t.Context(), []string{"-env", "", "-db", "sqlite:"}, io.Discard, nil), "want postgres://")
	t.Setenv(envconfig.VarTTL, "ten")
	err = run(t.Context(), []string{"-env", ""}, io.Discard, nil)
	assert.ErrorIs(t, err, redlock.ErrInvalid, "a malformed variable stops the service before it listens")
}

// A checkout whose lock is taken over while it is paying is refused by
// the database. Instance A enters the gateway holding the order's lock;
// the lock's key then vanishes from Redis (as when a master restarts
// without persistence or its clock jumps), before A's heartbeat could
// notice. Instance B takes the lock with a higher fencing token, claims
// the order and starts paying; when A's payment returns, its charge is
// refused (409, status "stale"), and B's charge, which comes after, is
// the ledger's only row.
func TestCheckoutStaleHolderRefused(t *testing.T) {
	for _, db := range databases() {
		t.Run(db.name, func(t *testing.T) {
			srv := miniredis.RunT(t)
			env := map[string]string{
				envconfig.VarEnabled: "true", envconfig.VarNodes: "redis://" + srv.Addr(),
				envconfig.VarStrategy: "reject", envconfig.VarTTL: "60", // heartbeat every 20 s: A never notices
			}
			st := openTestStore(t, db.dsn(t))
			ga, gb := newGateway(), newGateway()
			a := serverOn(t, fromEnv(t, env), ga, st, "A")
			b := serverOn(t, fromEnv(t, env), gb, st, "B")

			first := postAsync(t, a, "9", 900)
			require.Equal(t, "9", ga.waitEntered(t))
			key, err := httplock.KeySpace{}.Write(project, "order", "9")
			require.NoError(t, err)
			require.True(t, srv.Exists(key))
			srv.Del(key) // A's lock is gone; A does not know

			second := postAsync(t, b, "9", 900)
			require.Equal(t, "9", gb.waitEntered(t)) // B has claimed the order and is paying
			close(ga.release)
			ra := wait(t, first)
			assert.Equal(t, http.StatusConflict, ra.status, ra.body)
			assert.Equal(t, "stale", ra.body["status"])
			close(gb.release)
			rb := wait(t, second)
			require.Equal(t, http.StatusOK, rb.status, rb.body)
			assert.Equal(t, "success", rb.body["status"])
			assert.Less(t, ra.body["fence"], rb.body["fence"])

			o, _, err := st.get(t.Context(), "9")
			require.NoError(t, err)
			assert.Equal(t, "B", o.ChargedBy)
			assert.Equal(t, []ledgerRow{{OrderID: "9", Fence: int64(rb.body["fence"].(float64)), Instance: "B", Amount: 900}},
				ledger(t, st))
			assert.Empty(t, audit(t, st))
		})
	}
}

// The store's fencing rule, on each database: a claim or charge with a
// token lower than the order's is refused, and an order is charged once.
func TestStoreFencing(t *testing.T) {
	for _, db := range databases() {
		t.Run(db.name, func(t *testing.T) {
			ctx, dsn := t.Context(), db.dsn(t)
			st := openTestStore(t, dsn)
			o, err := st.claim(ctx, "1", 5)
			require.NoError(t, err)
			assert.Equal(t, order{ID: "1", Fence: 5}, o)
			_, err = st.claim(ctx, "1", 5)
			assert.ErrorIs(t, err, errStale, "a token claims once")
			_, err = st.claim(ctx, "1", 6)
			require.NoError(t, err)

			assert.ErrorIs(t, st.charge(ctx, "1", 5, "old", 100), errStale, "the holder of 5 was overtaken by 6")
			require.NoError(t, st.charge(ctx, "1", 6, "new", 100))
			_, err = st.claim(ctx, "1", 4)
			assert.ErrorIs(t, err, errStale)
			o, err = st.claim(ctx, "1", 7)
			require.NoError(t, err)
			assert.Equal(t, order{ID: "1", Amount: 100, ChargedBy: "new", Fence: 7}, o)
			assert.ErrorIs(t, st.charge(ctx, "1", 7, "again", 100), errStale, "charged already")
			assert.ErrorIs(t, st.charge(ctx, "2", 1, "x", 1), errStale, "no such order")

			got, ok, err := st.get(ctx, "1")
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, order{ID: "1", Amount: 100, ChargedBy: "new", Fence: 7}, got)
			_, ok, err = st.get(ctx, "2")
			require.NoError(t, err)
			assert.False(t, ok)
			assert.Equal(t, []ledgerRow{{OrderID: "1", Fence: 6, Instance: "new", Amount: 100}}, ledger(t, st))
			assert.Empty(t, audit(t, st))

			_, err = st.claim(ctx, "3", 1) // claimed, never charged: the audit reports it
			require.NoError(t, err)
			assert.Equal(t, []string{"3 charged_by=<nil> charges=0"}, audit(t, st))

			again := openTestStore(t, dsn) // opening an existing database keeps its tables
			_, ok, err = again.get(ctx, "1")
			require.NoError(t, err)
			assert.True(t, ok)
		})
	}
}

// auditQuery is the one query that checks the service's promise (the
// README shows it): it lists every order not charged exactly once, so
// no rows means each order was charged once, with one ledger row.
const auditQuery = `
SELECT o.id, o.charged_by, COUNT(l.order_id) AS charges
FROM orders o LEFT JOIN ledger l ON l.order_id = o.id
GROUP BY o.id, o.charged_by
HAVING o.charged_by IS NULL OR COUNT(l.order_id) <> 1
ORDER BY o.id`

// audit runs auditQuery and returns its rows as text.
func audit(t testing.TB, st *store) []string {
	t.Helper()
	rows, err := st.db.QueryContext(t.Context(), auditQuery)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		var by sql.NullString
		var n int
		require.NoError(t, rows.Scan(&id, &by, &n))
		byText := "<nil>"
		if by.Valid {
			byText = by.String
		}
		out = append(out, fmt.Sprintf("%s charged_by=%s charges=%d", id, byText, n))
	}
	require.NoError(t, rows.Err())
	return out
}

type ledgerRow struct {
	OrderID  string
	Fence    int64
	Instance string
	Amount   int64
}

// ledger returns the ledger, by order and fence.
func ledger(t testing.TB, st *store) []ledgerRow {
	t.Helper()
	rows, err := st.db.QueryContext(t.Context(), `SELECT order_id, fence, instance, amount FROM ledger ORDER BY order_id, fence`)
	require.NoError(t, err)
	defer rows.Close()
	var out []ledgerRow
	for rows.Next() {
		var r ledgerRow
		require.NoError(t, rows.Scan(&r.OrderID, &r.Fence, &r.Instance, &r.Amount))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}
