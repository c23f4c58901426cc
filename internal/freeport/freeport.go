// Package freeport finds free TCP ports on the loopback interface for the
// redis-server processes and containers that tests and commands start.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

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

// Stable returns a free TCP port on 127.0.0.1 below the kernel's
// ephemeral range, for a listener that must bind the same port again
// later: a container stopped and started again on its published port. A
// port from Get lies in the ephemeral range, where, while nothing
// listens on it, any outgoing connection of the machine may take it as
// its local port (seen: a container restarted after a delay failed with
// "address already in use"); below that range only a process that asks
// for the port by number can.
func Stable() (int, error) {
	lo := ephemeralLow()
	const first = 10000
	if lo <= first+1000 {
		return Get() // an unusual range: nothing to stay out of
	}
	for range 100 {
		port := first + rand.IntN(lo-first)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken: draw another
		}
		l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port found in [%d, %d)", first, lo)
}

// ephemeralLow returns the first port of the kernel's ephemeral range
// (Linux's net.ipv4.ip_local_port_range), 32768 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 {
		return 32768
	}
	return lo
}
