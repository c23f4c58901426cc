package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MasterName is the name under which LaunchSentinel's sentinels monitor
// the master.
const MasterName = "mymaster"

// SentinelTimeout bounds how long LaunchSentinel waits for the replica to
// be in sync and the sentinels to agree on the topology, and how long
// WaitFailover waits for a promotion.
const SentinelTimeout = 30 * time.Second

// The sentinels' timing: a master that has not answered for
// SentinelDownAfter is subjectively down, and a failover that has not
// completed within SentinelFailoverTimeout is retried.
const (
	SentinelDownAfter       = time.Second
	SentinelFailoverTimeout = 3 * time.Second
)

// Sentinel is a master, its replica and three sentinels monitoring it
// (LaunchSentinel). The embedded Cluster holds all five servers (master,
// replica, then the sentinels): its Stop stops them all.
type Sentinel struct {
	*Cluster
	// Data are the master and the replica as launched. Which one is the
	// master now is the sentinels' word: see MasterAddr.
	Data []*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server
}

// LaunchSentinel starts, on free 127.0.0.1 ports, a master and one
// replica of it (--replicaof), both without persistence as Launch starts
// them, and three sentinels (redis-server sentinel.conf --sentinel) that
// monitor the master as MasterName with a quorum of 2,
// SentinelDownAfter and SentinelFailoverTimeout. It waits until the
// replica is in sync and every sentinel sees the master as ok, its
// replica and the two other sentinels, for at most SentinelTimeout.
//
// The caller must call Stop. On error LaunchSentinel has already stopped
// whatever it started; the error says which server was not ready.
func LaunchSentinel(ctx context.Context, opts Options) (*Sentinel, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		return nil, fmt.Errorf("redisserver: %s not found on PATH: %w", Binary, err)
	}
	dir, err := os.MkdirTemp(opts.Dir, "redissentinel-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil { // a sentinel rewrites its config file: give it a full path
		return nil, errors.Join(fmt.Errorf("redisserver: %w", err), os.RemoveAll(dir))
	}
	t := &Sentinel{Cluster: &Cluster{dir: dir}}
	add := func(s *Server) error {
		s.bin, s.dir, s.ownGroup = bin, filepath.Join(dir, strconv.Itoa(len(t.Servers))), opts.OwnProcessGroup
		t.Servers = append(t.Servers, s)
		if err := os.Mkdir(s.dir, 0o700); err != nil {
			return err
		}
		if s.sentinel {
			conf := sentinelConf(t.Data[0].port)
			if err := os.WriteFile(filepath.Join(s.dir, "sentinel.conf"), []byte(conf), 0o600); err != nil {
				return err
			}
		}
		return s.start(ctx)
	}
	master := &Server{}
	err = add(master)
	if err == nil {
		t.Data = append(t.Data, master)
		replica := &Server{replicaOf: master.Addr()}
		if err = add(replica); err == nil {
			t.Data = append(t.Data, replica)
		}
	}
	for i := 0; i < 3 && err == nil; i++ {
		s := &Server{sentinel: true}
		if err = add(s); err == nil {
			t.Sentinels = append(t.Sentinels, s)
		}
	}
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, SentinelTimeout)
		err = t.waitReady(wctx)
		cancel()
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("redisserver: sentinel topology: %w", err), t.Stop())
	}
	return t, nil
}

// sentinelConf is the configuration file of a sentinel monitoring the
// master on 127.0.0.1:port.
func sentinelConf(port int) string {
	return fmt.Sprintf(`sentinel resolve-hostnames no
sentinel announce-ip 127.0.0.1
sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s %[3]d
sentinel failover-timeout %[1]s %[4]d
sentinel parallel-syncs %[1]s 1
`, MasterName, port, SentinelDownAfter.Milliseconds(), SentinelFailoverTimeout.Milliseconds())
}

// sentinelArgs are the arguments before the options: a sentinel's
// configuration file and --sentinel.
func (s *Server) sentinelArgs() []string {
	if !s.sentinel {
		return nil
	}
	return []string{filepath.Join(s.dir, "sentinel.conf"), "--sentinel"}
}

// replicaArgs make a replica of s.replicaOf.
func (s *Server) replicaArgs() []string {
	if s.replicaOf == "" {
		return nil
	}
	host, port, _ := net.SplitHostPort(s.replicaOf)
	return []string{"--replicaof", host, port}
}

// SentinelAddrs returns the sentinels' addresses.
func (t *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(t.Sentinels))
	for i, s := range t.Sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// MasterAddr returns the master's address as the first sentinel that
// answers reports it.
func (t *Sentinel) MasterAddr() (string, error) {
	return SentinelMasterAddr(t.SentinelAddrs())
}

// WaitFailover waits until every sentinel reports a master other than old
// (WaitSentinelFailover) and returns the new master's address.
func (t *Sentinel) WaitFailover(ctx context.Context, old string) (string, error) {
	return WaitSentinelFailover(ctx, t.SentinelAddrs(), old)
}

// waitReady waits for the topology as launched (WaitSentinelReady).
func (t *Sentinel) waitReady(ctx context.Context) error {
	return WaitSentinelReady(ctx, t.SentinelAddrs(), t.Data[0].Addr(), t.Data[1].Addr())
}

// SentinelMasterAddr returns the address of MasterName as the first of
// the sentinels at addrs that answers reports it.
func SentinelMasterAddr(sentinels []string) (string, error) {
	var errs []error
	for _, s := range sentinels {
		m, err := sentinelMaster(s)
		if err == nil {
			return m["address"], nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// WaitSentinelFailover waits until every sentinel at sentinels reports a
// master other than old and that server answers as a master (INFO
// replication role:master), for at most SentinelTimeout, and returns the
// new master's address. The servers may be processes or containers.
func WaitSentinelFailover(ctx context.Context, sentinels []string, old string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, SentinelTimeout)
	defer cancel()
	var last string
	for {
		addr, err := agreedMaster(sentinels)
		if err == nil && addr != old {
			info, ierr := command(addr, time.Second, "INFO", "replication")
			if ierr == nil && clusterField(info, "role") == "master" {
				return addr, nil
			}
			err = fmt.Errorf("%s not yet a master: %v %s", addr, ierr, info)
		}
		if err != nil {
			last = err.Error()
		} else {
			last = "the sentinels still report " + old
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redisserver: no failover from %s: %w (last: %s)", old, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agreedMaster returns the master address every sentinel reports, or an
// error when they do not agree yet.
func agreedMaster(sentinels []string) (string, error) {
	var addr string
	for _, s := range sentinels {
		m, err := sentinelMaster(s)
		if err != nil {
			return "", err
		}
		if addr != "" && m["address"] != addr {
			return "", fmt.Errorf("sentinels disagree: %s and %s", addr, m["address"])
		}
		addr = m["address"]
	}
	return addr, nil
}

// WaitSentinelReady waits until the replica's link to the master is up
// and every sentinel reports the master ok at master, with one replica and
// len(sentinels) sentinels, or ctx ends.
func WaitSentinelReady(ctx context.Context, sentinels []string, master, replica string) error {
	want := strconv.Itoa(len(sentinels))
	ready := func() error {
		info, err := command(replica, time.Second, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("replica %s: %w", replica, err)
		}
		if v := clusterField(info, "master_link_status"); v != "up" {
			return fmt.Errorf("replica %s: master_link_status:%s", replica, v)
		}
		for _, s := range sentinels {
			m, err := sentinelMaster(s)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s, err)
			}
			if m["status"] != "ok" || m["address"] != master || m["slaves"] != "1" || m["sentinels"] != want {
				return fmt.Errorf("sentinel %s: not ready: %v", s, m)
			}
		}
		return nil
	}
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sentinelMaster returns the fields of MasterName in a sentinel's INFO
// sentinel ("master0:name=mymaster,status=ok,address=...,slaves=1,sentinels=3").
func sentinelMaster(addr string) (map[string]string, error) {
	info, err := command(addr, time.Second, "INFO", "sentinel")
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(info) {
		_, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "master") {
			continue
		}
		m := map[string]string{}
		for f := range strings.SplitSeq(v, ",") {
			k, v, _ := strings.Cut(f, "=")
			m[k] = v
		}
		if m["name"] == MasterName {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%s does not monitor %s", addr, MasterName)
}
