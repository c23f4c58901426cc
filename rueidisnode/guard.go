package rueidisnode

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/quorumlock/redlock/internal/respguard"
	"github.com/redis/rueidis"
)

// Guard returns opt with a dialer that puts every connection behind a
// check of what the node sends. A connection ends, with an error naming
// what was refused, when the node sends what no Redis server sends: a
// string over 512 MiB, an aggregate over 2^24 elements, a length below
// -1, a byte that is no RESP type, or a reply to no command. Without it,
// rueidis makes a slice of any length it reads (a panic, and a client
// whose Close never returns) and panics on its own goroutine at a reply
// it did not expect, which ends the process. Build the client from the
// result:
//
//	c, err := rueidis.NewClient(rueidisnode.Guard(opt))
//
// Guard keeps opt's own DialCtxFn or DialFn, and dials as rueidis does
// without them.
func Guard(opt rueidis.ClientOption) rueidis.ClientOption {
	dial := opt.DialCtxFn
	if dial == nil && opt.DialFn != nil {
		legacy := opt.DialFn
		dial = func(_ context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
			return legacy(dst, d, cfg)
		}
	}
	if dial == nil {
		dial = dialTCP
	}
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		conn, err := dial(ctx, dst, d, cfg)
		if err != nil {
			return nil, err
		}
		return respguard.Conn(conn, respguard.Default), nil
	}
	return opt
}

// dialTCP dials as rueidis does when no dial function is set.
func dialTCP(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if cfg != nil {
		return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", dst)
	}
	return d.DialContext(ctx, "tcp", dst)
}
