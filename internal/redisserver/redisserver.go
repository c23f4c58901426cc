// Package redisserver runs real redis-server processes on 127.0.0.1, for the
// tests and for the commands (redlock bench) that need servers of their own.
//
// Launch is the core: it starts n servers, each on a free loopback port with
// persistence disabled (--save "" --appendonly no) in a working directory of
// its own, waits until every one answers PING and returns errors rather than
// failing anything; Cluster.Stop kills every server by PID, waits for it to
// be reaped and removes the directories. Start wraps Launch for tests: it
// skips the test when redis-server is not on PATH (or fails it, see
// internal/testenv) and stops the servers in t.Cleanup.
//
// LaunchRedisCluster starts servers in cluster mode instead and joins them
// into one Redis Cluster with redis-cli --cluster create (cluster.go); the
// Cluster it returns is stopped the same way. JoinCluster joins nodes
// started elsewhere (containers) without redis-cli, and the waits
// (WaitClusterReady, WaitSentinelReady, WaitSentinelFailover) take
// addresses, so they serve processes and containers alike.
//
// On Linux every server gets PR_SET_PDEATHSIG=SIGKILL, so it dies with the
// process that started it even when that process is killed before it could
// call Stop.
package redisserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/freeport"
)

// Binary is the name of the executable looked up on PATH.
const Binary = "redis-server"

// StartTimeout bounds how long Launch and Restart wait for a server to answer PING.
const StartTimeout = 5 * time.Second

// startAttempts is how many ports Launch tries per server before giving up
// (another process may grab a port between probing it and redis binding it).
const startAttempts = 3

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath(Binary)
	return err == nil
}

// Options adjust Launch. The zero value is what tests use.
type Options struct {
	// Dir is where Launch creates the cluster's temporary directory (one
	// subdirectory per server), which Stop removes. Empty means os.TempDir().
	Dir string
	// OwnProcessGroup puts every server in a process group of its own (on
	// Unix), so that a Ctrl-C on the terminal reaches only the command that
	// launched it, which then stops the server itself. Without it a Ctrl-C
	// reaches the servers too.
	OwnProcessGroup bool
}

// Cluster is a set of independent redis-server processes.
type Cluster struct {
	Servers []*Server

	dir string
}

// Launch starts n redis-server processes on free 127.0.0.1 ports and waits
// until each answers PING, for at most StartTimeout each or until ctx ends.
// The caller must call Stop. On error Launch has already stopped whatever it
// started; the error says which server failed and includes its output.
func Launch(ctx context.Context, n int, opts Options) (*Cluster, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		return nil, fmt.Errorf("redisserver: %s not found on PATH: %w", Binary, err)
	}
	dir, err := os.MkdirTemp(opts.Dir, "redisserver-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	return launch(ctx, bin, dir, n, opts, false)
}

// launch starts n servers in subdirectories of dir, in cluster mode when
// cluster is set; on error it stops whatever it started and removes dir.
func launch(ctx context.Context, bin, dir string, n int, opts Options, cluster bool) (*Cluster, error) {
	c := &Cluster{dir: dir}
	for i := range n {
		s := &Server{bin: bin, dir: filepath.Join(dir, strconv.Itoa(i)), ownGroup: opts.OwnProcessGroup, cluster: cluster}
		c.Servers = append(c.Servers, s)
		err := os.Mkdir(s.dir, 0o700)
		if err == nil {
			err = s.start(ctx)
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("redisserver: server %d: %w", i, err), c.Stop())
		}
	}
	return c, nil
}

// Addrs returns the "127.0.0.1:port" address of every server, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Stop kills every server by PID (resuming it first if paused), waits until
// each process has been reaped and removes the cluster's directory. It is
// safe to call more than once; a Server cannot be restarted after Stop.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Kill())
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("redisserver: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Server is one redis-server process. Its address stays the same across Restart.
type Server struct {
	bin      string
	dir      string
	ownGroup bool
	cluster  bool // a Redis Cluster node (LaunchRedisCluster)
	// replicaOf is the "127.0.0.1:port" of the master a replica starts
	// replicating from (LaunchSentinel); empty for a master.
	replicaOf string
	// sentinel is set for a Sentinel (LaunchSentinel): it runs in sentinel
	// mode from sentinel.conf in its directory.
	sentinel bool
	port     int
	busPort  int // the cluster bus port, when cluster is set
	addr     string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once the current process has been reaped
	paused bool
	log    *syncBuffer // stdout+stderr of the current process
}

// Addr returns "127.0.0.1:port"; it is stable across Restart.
func (s *Server) Addr() string { return s.addr }

// PID returns the process ID of the running (or paused) process, or 0 when
// the server is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return 0
	}
	return s.cmd.Process.Pid
}

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

// Kill sends SIGKILL to the process by PID (after SIGCONT if paused) and
// waits until it has been reaped. It is a no-op if the server is not running.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if !s.runningLocked() {
		return nil
	}
	if s.paused {
		_ = resume(s.cmd.Process)
		s.paused = false
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redisserver: killing %s (pid %d): %w", s.addr, s.cmd.Process.Pid, err)
	}
	<-s.done
	return nil
}

// Pause stops the process with SIGSTOP: connections stay open but nothing is
// answered. It is a no-op if the server is not running or already paused.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() || s.paused {
		return nil
	}
	if err := pause(s.cmd.Process); err != nil {
		return fmt.Errorf("redisserver: pausing %s: %w", s.addr, err)
	}
	s.paused = true
	return nil
}

// Resume continues a paused process with SIGCONT. It is a no-op if the
// server is not running or not paused.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() || !s.paused {
		return nil
	}
	if err := resume(s.cmd.Process); err != nil {
		return fmt.Errorf("redisserver: resuming %s: %w", s.addr, err)
	}
	s.paused = false
	return nil
}

// Restart kills the server if it is still running and starts it again on the
// same port with an empty dataset, waiting until it answers PING. A Redis
// Cluster node keeps its cluster configuration (node ID, bus port, peers)
// and rejoins its cluster.
func (s *Server) Restart() error {
	s.mu.Lock()
	err := s.killLocked()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	for attempt := 0; attempt < startAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err = s.launch(context.Background()); err == nil {
			return nil
		}
	}
	return fmt.Errorf("redisserver: restarting %s: %w", s.addr, err)
}

// start launches the first process on a free port, trying another port
// when that one turns out to be taken.
func (s *Server) start(ctx context.Context) error {
	var err error
	for attempt := 0; attempt < startAttempts && ctx.Err() == nil; attempt++ {
		var port int
		if port, err = freeport.Get(); err != nil {
			return fmt.Errorf("finding a free port: %w", err)
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if s.cluster {
			if s.busPort, err = freeport.Get(); err != nil {
				return fmt.Errorf("finding a free port: %w", err)
			}
		}
		if err = s.launch(ctx); err == nil {
			return nil
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// launch starts one process on s.port and waits for PING. On failure the
// process is killed and an error including its output is returned.
func (s *Server) launch(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := &syncBuffer{}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
	}
	if s.cluster {
		args = append(args, clusterArgs(s.busPort)...)
	}
	args = append(s.sentinelArgs(), append(args, s.replicaArgs()...)...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = log
	cmd.Stderr = log
	setSysProcAttr(cmd, s.ownGroup)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.log, s.paused = cmd, done, log, false

	if err := waitPing(ctx, s.addr, done, StartTimeout); err != nil {
		kerr := s.killLocked()
		return errors.Join(fmt.Errorf("%s (pid %d) did not answer PING on %s: %w\n--- redis-server output ---\n%s",
			s.bin, cmd.Process.Pid, s.addr, err, log.String()), kerr)
	}
	return nil
}

// waitPing polls addr with a RESP PING until it gets +PONG, the process exits
// (done is closed), ctx ends or timeout passes.
func waitPing(ctx context.Context, addr string, done <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		lastErr := ping(addr, 500*time.Millisecond)
		if lastErr == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("process exited")
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("timed out after %v: %w", timeout, lastErr)
			}
			return errors.Join(lastErr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
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
