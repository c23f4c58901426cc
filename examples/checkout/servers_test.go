package main

// Test servers: redis-server processes, started for one test and killed
// by PID in its cleanup.
//
// The core module has a redis-server launcher (internal/redisserver) and a
// skip-or-fail rule (internal/testenv), but this is another module, and Go
// forbids importing a module's internal packages from outside it; the
// core's API stays as it is. So the little this module needs is here:
// requireOrSkip mirrors internal/testenv, startRedis is the bare minimum
// of internal/redisserver.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireRedis, set to "1", turns a missing redis-server into a test
// failure instead of a skip (CI sets it; see .ci/run).
const requireRedis = "REDLOCK_REQUIRE_REDIS"

// requireOrSkip stops a test whose server is missing: it fails when env
// is "1", and skips otherwise.
func requireOrSkip(t testing.TB, env, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(env) == "1" {
		t.Fatalf("%s (%s=1, so this is fatal)", msg, env)
	}
	t.Skipf("%s (set %s=1 to fail instead of skipping)", msg, env)
}

// startTimeout bounds how long a server may take to answer.
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

// freePort asks the kernel for a free loopback port. Another process may
// take it before the server binds it, so the launchers retry.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts n redis-server processes without persistence on
// loopback ports and returns their addresses.
func startRedis(t testing.TB, n int) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		requireOrSkip(t, requireRedis, "redis-server not found on PATH (Debian: apt-get install redis-server)")
	}
	addrs := make([]string, n)
	for i := range addrs {
		var p *proc
		for attempt := 0; attempt < 3 && p == nil; attempt++ {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "")
			cmd.Dir = dir
			if p, err = startProc(cmd); err != nil {
				t.Fatal(err)
			}
			addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if err = waitReady(p, func() error { return redisPing(addrs[i]) }); err != nil {
				p.stop(0, 0)
				t.Logf("redis-server on %s: %v\n%s", addrs[i], err, p.out)
				p = nil
			}
		}
		if p == nil {
			t.Fatalf("redis-server %d did not start", i)
		}
		t.Cleanup(func() { p.stop(0, 0) })
	}
	return addrs
}

// redisPing sends one RESP PING.
func redisPing(addr string) error {
	reply, err := redisDo(addr, "PING")
	if err == nil && reply != "+PONG" {
		err = fmt.Errorf("PING: %q", reply)
	}
	return err
}

// redisDo sends one command over a fresh connection and returns the first
// line of the reply.
func redisDo(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	req := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSuffix(line, "\r\n"), err
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
