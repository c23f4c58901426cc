package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/quorumlock/redlock/internal/freeport"
	"github.com/redis/go-redis/v9"
)

// localServers are Redis masters the command started for itself: real
// redis-server processes when the binary is on PATH, in-process miniredis
// otherwise. stop ends every one of them; it is safe to call more than once.
type localServers struct {
	addrs []string
	procs []*exec.Cmd
	dirs  []string
	minis []*miniredis.Miniredis
	real  bool
}

// startServers starts n masters on free 127.0.0.1 ports. On error it has
// already stopped whatever it started.
func startServers(ctx context.Context, n int) (*localServers, error) {
	s := &localServers{}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		for range n {
			m := miniredis.NewMiniRedis()
			if err := m.Start(); err != nil {
				s.stop()
				return nil, err
			}
			s.minis = append(s.minis, m)
			s.addrs = append(s.addrs, m.Addr())
		}
		return s, nil
	}
	s.real = true
	for range n {
		if err := s.startOne(ctx, bin); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

// startOne starts one redis-server without persistence, in its own
// process group (so a Ctrl-C on the terminal reaches only this command,
// which then stops the server itself), and waits for it to answer PING.
func (s *localServers) startOne(ctx context.Context, bin string) error {
	var last error
	for range 3 { // the free port may be taken between probing and binding
		port, err := freeport.Get()
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "redlock-bench-")
		if err != nil {
			return err
		}
		s.dirs = append(s.dirs, dir)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir, "--logfile", "")
		cmd.Dir = dir
		ownGroup(cmd)
		dieWithUs(cmd)
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting redis-server: %w", err)
		}
		s.procs = append(s.procs, cmd)
		if last = waitReady(ctx, addr); last == nil {
			s.addrs = append(s.addrs, addr)
			return nil
		}
		kill(cmd)
	}
	return fmt.Errorf("redis-server did not answer: %w", last)
}

// stop kills every started server by PID and removes its directory.
func (s *localServers) stop() {
	for _, c := range s.procs {
		kill(c)
	}
	s.procs = nil
	for _, d := range s.dirs {
		os.RemoveAll(d)
	}
	s.dirs = nil
	for _, m := range s.minis {
		m.Close()
	}
	s.minis = nil
}

func kill(c *exec.Cmd) {
	if c.Process == nil || c.ProcessState != nil {
		return
	}
	_ = c.Process.Kill()
	_ = c.Wait()
}

// waitReady pings addr until it answers, for at most five seconds.
func waitReady(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
