package goredis

import (
	"context"
	"net"

	"github.com/quorumlock/redlock/internal/respguard"
	"github.com/redis/go-redis/v9"
)

// guard puts every connection the client dials from now on behind
// respguard: a reply no Redis server sends (a string over 512 MiB, an
// aggregate over 2^24 elements, a negative length, a byte that is no
// RESP type, a reply to no command) closes that connection with an
// error, where go-redis would allocate the length it read or hand a
// stale reply to the next command. A cluster client's nodes are its
// own clients: each is guarded when the cluster client creates it.
func guard(c redis.UniversalClient) {
	switch c := c.(type) {
	case *redis.Client:
		c.AddHook(guardHook{})
	case *redis.ClusterClient:
		c.OnNewNode(func(node *redis.Client) { node.AddHook(guardHook{}) })
	}
}

type guardHook struct{}

func (guardHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return respguard.Conn(conn, respguard.Default), nil
	}
}

func (guardHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (guardHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
