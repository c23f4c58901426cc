package main

import (
	"context"

	"github.com/alicebob/miniredis/v2"

	"github.com/quorumlock/redlock/internal/redisserver"
)

// localServers are Redis masters the command started for itself: real
// redis-server processes when the binary is on PATH, in-process miniredis
// otherwise. stop ends every one of them; it is safe to call more than once.
type localServers struct {
	addrs []string
	procs *redisserver.Cluster
	minis []*miniredis.Miniredis
	real  bool
}

// startServers starts n masters on free 127.0.0.1 ports. Real servers run
// without persistence, each in a process group of its own (so a Ctrl-C on
// the terminal reaches only this command, which then stops them itself)
// and, on Linux, die with this process. On error it has already stopped
// whatever it started.
func startServers(ctx context.Context, n int) (*localServers, error) {
	s := &localServers{}
	if !redisserver.Available() {
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
	c, err := redisserver.Launch(ctx, n, redisserver.Options{OwnProcessGroup: true})
	if err != nil {
		return nil, err
	}
	s.procs, s.addrs, s.real = c, c.Addrs(), true
	return s, nil
}

// stop kills every started server by PID, waits for it and removes its
// directory.
func (s *localServers) stop() error {
	var err error
	if s.procs != nil {
		err = s.procs.Stop()
		s.procs = nil
	}
	for _, m := range s.minis {
		m.Close()
	}
	s.minis = nil
	return err
}
