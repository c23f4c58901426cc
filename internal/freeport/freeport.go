// Package freeport finds free TCP ports on the loopback interface for the
// redis-server processes and containers that tests and commands start.
package freeport

import "net"

// Get asks the kernel for a free TCP port on 127.0.0.1. The port is free
// when Get returns; another process may take it before the caller binds
// it, so callers retry on a bind failure.
func Get() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
