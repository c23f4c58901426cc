//go:build unix

package redisserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redisserver"
	"github.com/quorumlock/redlock/internal/redistest"
)

// needRedis skips (or fails, see internal/testenv) the tests that call
// Launch directly, as Start does for the others.
func needRedis(t *testing.T) {
	t.Helper()
	redistest.Start(t, 0)
}

// gone reports whether no process has the given PID any more (a zombie,
// killed but not reaped, still has one).
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// zombieOrGone reports whether pid is gone or has exited and only waits to
// be reaped by whoever inherited it (in a container, PID 1 may never reap).
func zombieOrGone(pid int) bool {
	if gone(pid) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err != nil
}

// TestLaunchStop checks the core without testing.TB: Launch starts servers
// that answer, Stop kills them by PID and reaps them, closes their ports,
// removes their directories, and may be called again.
func TestLaunchStop(t *testing.T) {
	needRedis(t)
	parent := t.TempDir()
	c, err := redisserver.Launch(context.Background(), 3, redisserver.Options{Dir: parent})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var pids []int
	for i, s := range c.Servers {
		pid := s.PID()
		if pid <= 0 || gone(pid) {
			t.Fatalf("server %d: PID() = %d, want a live process", i, pid)
		}
		if refused(s.Addr()) {
			t.Fatalf("server %d: %s refuses connections after Launch", i, s.Addr())
		}
		pids = append(pids, pid)
	}
	// One paused and one already killed: Stop handles both.
	if err := c.Servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.Servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for i, s := range c.Servers {
		if !gone(pids[i]) {
			t.Errorf("server %d: pid %d still exists after Stop", i, pids[i])
		}
		if s.Running() || s.PID() != 0 {
			t.Errorf("server %d: Running() = %v, PID() = %d after Stop", i, s.Running(), s.PID())
		}
		if !refused(s.Addr()) {
			t.Errorf("server %d: %s still accepts connections after Stop", i, s.Addr())
		}
	}
	if entries, err := os.ReadDir(parent); err != nil || len(entries) != 0 {
		t.Errorf("Stop left %v in Options.Dir (err %v)", entries, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestKillRestartByPID checks that Kill reaps the process it killed and
// that Restart runs a new one at the same address.
func TestKillRestartByPID(t *testing.T) {
	s := redistest.Start(t, 1).Servers[0]
	old := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if !gone(old) {
		t.Fatalf("pid %d still exists after Kill", old)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if pid == 0 || pid == old || gone(pid) {
		t.Fatalf("PID() after Restart = %d (before %d), want a new live process", pid, old)
	}
	if err := s.Restart(); err != nil { // kills the live process first
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Fatalf("pid %d still exists after a Restart of a running server", pid)
	}
}

// TestLaunchErrors checks that Launch returns errors instead of failing a
// test or exiting, and leaves nothing behind when it gives up.
func TestLaunchErrors(t *testing.T) {
	needRedis(t)
	t.Run("canceled", func(t *testing.T) {
		parent := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c, err := redisserver.Launch(ctx, 2, redisserver.Options{Dir: parent})
		if err == nil {
			c.Stop()
			t.Fatal("Launch with a canceled context succeeded")
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 0 {
			t.Errorf("a failed Launch left %v behind", entries)
		}
	})
	t.Run("no binary", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := redisserver.Launch(context.Background(), 1, redisserver.Options{})
		if !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("err = %v, want exec.ErrNotFound", err)
		}
	})
}

// TestOwnProcessGroup checks Options.OwnProcessGroup: the server leads a
// group of its own instead of joining ours.
func TestOwnProcessGroup(t *testing.T) {
	needRedis(t)
	for _, own := range []bool{false, true} {
		c, err := redisserver.Launch(context.Background(), 1, redisserver.Options{Dir: t.TempDir(), OwnProcessGroup: own})
		if err != nil {
			t.Fatal(err)
		}
		pid := c.Servers[0].PID()
		pgid, err := syscall.Getpgid(pid)
		if stopErr := c.Stop(); stopErr != nil {
			t.Fatal(stopErr)
		}
		if err != nil {
			t.Fatal(err)
		}
		want := syscall.Getpgrp()
		if own {
			want = pid
		}
		if pgid != want {
			t.Errorf("OwnProcessGroup=%v: pgid %d, want %d", own, pgid, want)
		}
	}
}

const deathChildEnv = "REDISSERVER_DEATH_CHILD"

// TestServerDiesWithItsParent checks PR_SET_PDEATHSIG: a process that
// launched a server and is then SIGKILLed, so that it never calls Stop,
// takes the server with it.
func TestServerDiesWithItsParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("PR_SET_PDEATHSIG is Linux only")
	}
	needRedis(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeathChild$")
	cmd.Env = append(os.Environ(), deathChildEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the server's PID from the child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	if err != nil || gone(pid) {
		t.Fatalf("child reported %q: want the PID of a live server", line)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for !zombieOrGone(pid) {
		if time.Now().After(deadline) {
			// Not ours to kill by then, but do not leave it running.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("server pid %d survived its parent by 5s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeathChild is the parent TestServerDiesWithItsParent kills: it
// launches a server, prints its PID and waits to be killed.
func TestDeathChild(t *testing.T) {
	dir := os.Getenv(deathChildEnv)
	if dir == "" {
		t.Skip("run by TestServerDiesWithItsParent")
	}
	c, err := redisserver.Launch(context.Background(), 1, redisserver.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	fmt.Printf("pid %d\n", c.Servers[0].PID())
	time.Sleep(30 * time.Second)
}
