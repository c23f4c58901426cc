package main

// Test servers. redis-server comes from the core's internal/redistest
// (this module's import path is under github.com/quorumlock/redlock, so
// Go lets it import the core's internal packages), and a missing server
// is skipped or failed by internal/testenv. PostgreSQL, which only this
// module's tests use, is launched here, as are the service instances of
// the end-to-end tests: processes started for one test (startProc) and
// killed by PID in its cleanup. internal/redisserver keeps its process
// handling to itself (it exports none), so the few lines of it these
// need are below and in sysproc_*_test.go.

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/quorumlock/redlock/internal/testenv"
)

// startTimeout bounds how long a process of a test may take to be ready.
const startTimeout = 30 * time.Second

// proc is a server process of a test.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	out  *syncBuffer   // its stdout and stderr
}

// startProc starts cmd in a process group of its own (and, on Linux, with
// SIGKILL as its parent-death signal, so it cannot outlive the test
// binary), collecting its output.
func startProc(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{}), out: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	setProcAttr(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig to the process (none if 0), waits for it up to grace,
// then kills its whole process group and waits until it is reaped.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if sig != 0 {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // the group: postgres's children too
	<-p.done
}

// waitReady calls ready until it succeeds, the process exits, or
// startTimeout passes.
func waitReady(p *proc, ready func() error) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := ready()
		switch {
		case err == nil:
			return nil
		case p.exited():
			return fmt.Errorf("exited: %w", err)
		case time.Now().After(deadline):
			return fmt.Errorf("not ready after %v: %w", startTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// postgresBin returns the directory holding initdb and postgres: the one
// on PATH, else Debian's newest /usr/lib/postgresql/N/bin; "" if none.
func postgresBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err := filepath.EvalSymlinks(p); err == nil {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
				return filepath.Dir(p)
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { // numerically: 9 < 15
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d
		}
	}
	return ""
}

// startPostgres starts a throwaway PostgreSQL cluster for the test and
// returns its URL (user checkout, database postgres, no password). The
// cluster lives in a temporary directory of its own, not under
// t.TempDir(), whose parents only root may enter: PostgreSQL refuses to
// run as root, so as root the cluster runs as the user postgres (which
// Debian's package creates). It is stopped by PID in t.Cleanup: SIGINT
// (fast shutdown), then SIGKILL to its process group after 10 s.
func startPostgres(t testing.TB) string {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		testenv.SkipOrFail(t, testenv.Postgres, "PostgreSQL's initdb and postgres not found on PATH nor in /usr/lib/postgresql/*/bin "+
			"(Debian: apt-get install postgresql)")
	}
	dir, err := os.MkdirTemp("", "checkout-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs another user, and there is no user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	as := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*startTimeout)
	defer cancel()
	initdb := as(exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data,
		"-U", "checkout", "-A", "trust", "-E", "UTF8", "--no-sync"))
	setProcAttr(initdb.SysProcAttr)
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freeport.Get()
		if err != nil {
			t.Fatal(err)
		}
		p, err := startProc(as(exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir,
			"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-F", "-c", "max_connections=50")))
		if err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("postgres://checkout@127.0.0.1:%d/postgres?sslmode=disable", port)
		if err = waitReady(p, func() error { return pgPing(url) }); err != nil {
			p.stop(0, 0)
			t.Logf("postgres on port %d: %v\n%s", port, err, p.out)
			continue
		}
		t.Cleanup(func() { p.stop(syscall.SIGINT, 10*time.Second) })
		return url
	}
	t.Fatal("postgres did not start")
	return ""
}

// pgPing opens one connection to url and pings it.
func pgPing(url string) error {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// databases are the databases the store and the service are tested on:
// SQLite always, PostgreSQL when it is installed. Each returns the -db
// value for a fresh, empty database.
func databases() []struct {
	name string
	dsn  func(t testing.TB) string
} {
	return []struct {
		name string
		dsn  func(t testing.TB) string
	}{
		{"sqlite", func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "checkout.db") }},
		{"postgres", startPostgres},
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent Write and String.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
