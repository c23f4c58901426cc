package main

// End to end: the service binary, three instances of it as separate
// processes, five redis-servers and one database (a SQLite file the three
// share, and PostgreSQL when it is installed).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/redlock/envconfig"
	"github.com/quorumlock/redlock/httplock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// built is the service binary, built once per test binary (under the race
// detector when the tests run under it) and removed by TestMain.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// serviceBinary builds the service with go build, once.
func serviceBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		gotool, err := exec.LookPath("go")
		if err != nil {
			built.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "checkout-bin-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "checkout")
		args := []string{"build", "-o", built.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command(gotool, append(args, ".")...).CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, built.err)
	return built.path
}

// removeBinary is called by TestMain once every test has run.
func removeBinary() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// instance is one service process.
type instance struct {
	name, url string
}

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// startInstance starts the service binary as a separate process on a
// free port, with the LOCK_DISTRIBUTED_* variables env. It stops it in
// t.Cleanup with SIGTERM (a graceful shutdown that releases the locks of
// checkouts in flight), and reports an exit status other than 0 (the race
// detector exits with 66) or a data race in its output.
func startInstance(t *testing.T, name, dsn string, env map[string]string, flags ...string) instance {
	t.Helper()
	cmd := exec.Command(serviceBinary(t), append([]string{"-addr", "127.0.0.1:0", "-env", "",
		"-db", dsn, "-instance", name}, flags...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = os.Environ()
	for k, v := range env { // later entries win over the inherited ones
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p, err := startProc(cmd)
	require.NoError(t, err)
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM, 15*time.Second)
		if code := p.cmd.ProcessState.ExitCode(); code != 0 || strings.Contains(p.out.String(), "DATA RACE") {
			t.Errorf("instance %s exited with status %d:\n%s", name, code, p.out)
		}
	})
	var url string
	err = waitReady(p, func() error {
		if m := listening.FindStringSubmatch(p.out.String()); m != nil {
			url = m[1]
			return nil
		}
		return fmt.Errorf("not listening yet")
	})
	require.NoError(t, err, "instance %s:\n%s", name, p.out)
	return instance{name: name, url: url}
}

// lockEnv is the LOCK_DISTRIBUTED_* configuration of the instances.
func lockEnv(addrs []string, strategy string, ttlSeconds int) map[string]string {
	nodes := make([]string, len(addrs))
	for i, a := range addrs {
		nodes[i] = "redis://" + a
	}
	return map[string]string{
		envconfig.VarEnabled: "true", envconfig.VarNodes: strings.Join(nodes, ","),
		envconfig.VarStrategy: strategy, envconfig.VarTTL: fmt.Sprint(ttlSeconds),
		envconfig.VarRetry: "3", envconfig.VarRetryDelay: "20",
	}
}

// outcome is what a client saw for one checkout.
type outcome struct {
	order, instance string
	status          int
	body            map[string]any
	err             error
	took            time.Duration
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("order %s on %s: %v", o.order, o.instance, o.err)
	}
	return fmt.Sprintf("order %s on %s: %d %v", o.order, o.instance, o.status, o.body)
}

// kind classifies an outcome: success, already_paid, busy (the lock was
// held), or anything else, which no checkout of a healthy run may see.
func (o outcome) kind() string {
	switch {
	case o.err != nil:
		return "transport error"
	case o.status == http.StatusOK && (o.body["status"] == "success" || o.body["status"] == "already_paid"):
		return o.body["status"].(string)
	case o.status == http.StatusConflict && o.body["status"] == nil:
		return "busy"
	}
	return fmt.Sprintf("unexpected %d %v", o.status, o.body["status"])
}

func checkoutVia(ctx context.Context, c *http.Client, in instance, order string, amount int64) outcome {
	start := time.Now()
	o := outcome{order: order, instance: in.name}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.url+"/orders/"+order+"/checkout",
		strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount)))
	if err == nil {
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			o.status = resp.StatusCode
			err = json.NewDecoder(resp.Body).Decode(&o.body)
			resp.Body.Close()
		}
	}
	o.err, o.took = err, time.Since(start)
	return o
}

// Many concurrent checkouts of the same and of different orders, spread
// over three instances: every order is charged exactly once, by one
// instance, with one ledger row, and no checkout fails.
func TestEndToEndChargedOnce(t *testing.T) {
	const (
		orders   = 20  // distinct orders
		perOrder = 10  // checkouts of each order
		clients  = 30  // requests in flight at once
		amount   = 700 // per order
	)
	for _, db := range databases() {
		t.Run(db.name, func(t *testing.T) {
			dsn := db.dsn(t)
			env := lockEnv(redistest.Start(t, 5).Addrs(), "retry", 10)
			var ins []instance
			for i := range 3 {
				ins = append(ins, startInstance(t, fmt.Sprintf("i%d", i+1), dsn, env, "-charge-delay", "100ms"))
			}

			// The checkouts of one order are sent together, to the three
			// instances in turn: with 30 requests in flight, three orders
			// have their ten checkouts in flight at once.
			type job struct {
				order string
				in    instance
			}
			jobs := make(chan job, orders*perOrder)
			for k := range orders {
				for r := range perOrder {
					jobs <- job{fmt.Sprintf("e2e-%02d", k), ins[(k+r)%len(ins)]}
				}
			}
			close(jobs)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
			defer client.CloseIdleConnections()
			results := make(chan outcome, orders*perOrder)
			var wg sync.WaitGroup
			start := time.Now()
			for range clients {
				wg.Go(func() {
					for j := range jobs {
						results <- checkoutVia(ctx, client, j.in, j.order, amount)
					}
				})
			}
			wg.Wait()
			close(results)
			elapsed := time.Since(start)

			kinds := map[string]int{}
			successes := map[string][]string{} // order → instances that answered success
			var slowest time.Duration
			for o := range results {
				kinds[o.kind()]++
				if o.kind() == "success" {
					successes[o.order] = append(successes[o.order], o.instance)
				}
				if !strings.Contains("success already_paid busy", o.kind()) {
					t.Errorf("unexpected outcome: %v", o)
				}
				slowest = max(slowest, o.took)
			}
			assert.Len(t, successes, orders, "every order was charged")
			for order, by := range successes {
				assert.Len(t, by, 1, "order %s answered success more than once: %v", order, by)
			}

			st := openTestStore(t, dsn)
			assert.Empty(t, audit(t, st), "the audit query lists no order charged other than once")
			rows := ledger(t, st)
			assert.Len(t, rows, orders, "one ledger row per order")
			for _, r := range rows {
				o, _, err := st.get(t.Context(), r.OrderID)
				require.NoError(t, err)
				assert.Equal(t, o.ChargedBy, r.Instance, "order %s: the ledger names the instance that charged", r.OrderID)
				assert.Equal(t, successes[r.OrderID], []string{r.Instance}, "order %s: charged by the instance that answered success", r.OrderID)
				assert.EqualValues(t, amount, r.Amount)
			}
			var n int
			require.NoError(t, st.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM orders`).Scan(&n))
			assert.Equal(t, orders, n)
			byInstance := map[string]int{}
			for _, r := range rows {
				byInstance[r.Instance]++
			}
			t.Logf("%s: %d checkouts of %d orders over %d instances, %d in flight: %v in %v (slowest %v); charges by instance %v",
				db.name, orders*perOrder, orders, len(ins), clients, kinds, elapsed.Round(time.Millisecond),
				slowest.Round(time.Millisecond), byInstance)
		})
	}
}

// A stale holder, across processes: instance A claims an order and
// enters its (3 s) payment; the order's lock key then vanishes from all
// five masters (as when they restart without persistence), and A, whose
// heartbeat runs every 10 s (TTL 30 s), does not know. Instance B takes
// the lock with a higher fencing token and claims the order; when A's
// payment returns, the database refuses A's charge (409 "stale"), and B's
// charge is the order's only one.
func TestEndToEndStaleHolderRefused(t *testing.T) {
	for _, db := range databases() {
		t.Run(db.name, func(t *testing.T) {
			dsn := db.dsn(t)
			addrs := redistest.Start(t, 5).Addrs()
			env := lockEnv(addrs, "reject", 30)
			a := startInstance(t, "A", dsn, env, "-charge-delay", "3s")
			b := startInstance(t, "B", dsn, env, "-charge-delay", "3s")
			st := openTestStore(t, dsn)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()

			first := make(chan outcome, 1)
			go func() { first <- checkoutVia(ctx, client, a, "stale-1", 500) }()
			var claimed order
			require.NoError(t, waitFor(ctx, func() bool {
				o, ok, err := st.get(ctx, "stale-1")
				claimed = o
				return err == nil && ok && o.Fence > 0
			}), "A never claimed the order")
			key, err := httplock.KeySpace{}.Write(project, "order", "stale-1")
			require.NoError(t, err)
			for _, addr := range addrs {
				n, err := redistest.Client(t, addr).Del(ctx, key).Result()
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "A's lock key on %s", addr)
			}

			rb := checkoutVia(ctx, client, b, "stale-1", 500)
			ra := <-first
			require.NoError(t, ra.err)
			require.NoError(t, rb.err)
			assert.Equal(t, http.StatusConflict, ra.status, "A: %v", ra)
			assert.Equal(t, "stale", ra.body["status"], "A: %v", ra)
			assert.Equal(t, http.StatusOK, rb.status, "B: %v", rb)
			assert.Equal(t, "success", rb.body["status"], "B: %v", rb)
			assert.EqualValues(t, claimed.Fence, ra.body["fence"])
			assert.Greater(t, rb.body["fence"], ra.body["fence"])

			o, _, err := st.get(ctx, "stale-1")
			require.NoError(t, err)
			assert.Equal(t, "B", o.ChargedBy)
			assert.Equal(t, []ledgerRow{{OrderID: "stale-1", Fence: int64(rb.body["fence"].(float64)), Instance: "B", Amount: 500}},
				ledger(t, st))
			assert.Empty(t, audit(t, st))
		})
	}
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
