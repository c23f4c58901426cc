// Package redisserver runs real redis-server processes on 127.0.0.1 for tests.
//
// Every server listens on a free loopback port, works in its own t.TempDir(),
// has persistence disabled (--save "" --appendonly no) and is killed by PID when
// the test that started it finishes.
package redisserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/freeport"
)

// Binary is the name of the executable looked up on PATH.
const Binary = "redis-server"

// RequireEnv is the environment variable that turns a missing redis-server
// from a skipped test into a failed one.
const RequireEnv = "REDLOCK_REQUIRE_REDIS"

// StartTimeout bounds how long Start and Restart wait for a server to answer PING.
const StartTimeout = 5 * time.Second

// startAttempts is how many ports Start tries per server before giving up
// (another process may grab a port between probing it and redis binding it).
const startAttempts = 3

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath(Binary)
	return err == nil
}

// Required reports whether REDLOCK_REQUIRE_REDIS=1, i.e. tests must fail
// rather than skip when redis-server is unavailable.
func Required() bool {
	return os.Getenv(RequireEnv) == "1"
}

// Cluster is a set of independent redis-server processes.
type Cluster struct {
	Servers []*Server
}

// Addrs returns the "127.0.0.1:port" address of every server, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Server is one redis-server process. Its address stays the same across Restart.
type Server struct {
	bin  string
	dir  string
	port int
	addr string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once the current process has been reaped
	paused bool
	log    *syncBuffer // stdout+stderr of the current process
}

// Start launches n redis-server processes and waits until each answers PING.
// If redis-server is not on PATH the test is skipped, or failed when
// REDLOCK_REQUIRE_REDIS=1. All processes are killed in t.Cleanup.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		msg := fmt.Sprintf("redisserver: %s not found on PATH (%v); install it (Debian: apt-get install redis-server)", Binary, err)
		if Required() {
			t.Fatalf("%s; %s=1 so this is fatal", msg, RequireEnv)
		}
		t.Skipf("%s; set %s=1 to fail instead of skipping", msg, RequireEnv)
	}

	c := &Cluster{}
	t.Cleanup(func() {
		for _, s := range c.Servers {
			s.Kill()
		}
	})
	for i := 0; i < n; i++ {
		s := &Server{bin: bin, dir: t.TempDir()}
		c.Servers = append(c.Servers, s)
		var lastErr error
		for attempt := 0; attempt < startAttempts; attempt++ {
			port, err := freeport.Get()
			if err != nil {
				t.Fatalf("redisserver: finding a free port: %v", err)
			}
			s.port = port
			s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if lastErr = s.launch(); lastErr == nil {
				break
			}
		}
		if lastErr != nil {
			t.Fatalf("redisserver: server %d: %v", i, lastErr)
		}
	}
	return c
}

// Addr returns "127.0.0.1:port"; it is stable across Restart.
func (s *Server) Addr() string { return s.addr }

// Running reports whether the process is alive (paused counts as running).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (after SIGCONT if paused) and waits for the process to be
// reaped. It is a no-op if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if !s.runningLocked() {
		return
	}
	if s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Pause stops the process with SIGSTOP: connections stay open but nothing is answered.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() || s.paused {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err == nil {
		s.paused = true
	}
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() || !s.paused {
		return
	}
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err == nil {
		s.paused = false
	}
}

// Restart kills the server if it is still running and starts it again on the
// same port with an empty dataset, waiting until it answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	s.killLocked()
	s.mu.Unlock()
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("redisserver: restarting %s: %v", s.addr, err)
}

// launch starts one process on s.port and waits for PING. On failure the
// process is killed and an error including its output is returned.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := &syncBuffer{}
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
	)
	cmd.Dir = s.dir
	cmd.Stdout = log
	cmd.Stderr = log
	setSysProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.log, s.paused = cmd, done, log, false

	if err := waitPing(s.addr, done, StartTimeout); err != nil {
		s.killLocked()
		return fmt.Errorf("%s (pid %d) did not answer PING on %s: %w\n--- redis-server output ---\n%s",
			s.bin, cmd.Process.Pid, s.addr, err, log.String())
	}
	return nil
}

// waitPing polls addr with a RESP PING until it gets +PONG, the process exits
// (done is closed) or timeout passes.
func waitPing(addr string, done <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		select {
		case <-done:
			return errors.New("process exited")
		default:
		}
		if lastErr = ping(addr, 500*time.Millisecond); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v: %w", timeout, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends one RESP PING over a fresh connection.
func ping(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
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
