package redisserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/redistest"
)

// TestSentinelFailover launches the topology, checks that the sentinels
// name the launched master, kills it and waits for the replica's
// promotion.
func TestSentinelFailover(t *testing.T) {
	topo := redistest.StartSentinel(t)
	master, replica := topo.Data[0], topo.Data[1]
	if got, err := topo.MasterAddr(); err != nil || got != master.Addr() {
		t.Fatalf("MasterAddr = %q, %v; want %s", got, err, master.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, master.Addr())
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx, 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := master.Kill(); err != nil {
		t.Fatal(err)
	}
	got, err := topo.WaitFailover(ctx, master.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if got != replica.Addr() {
		t.Fatalf("new master %s, want the replica %s", got, replica.Addr())
	}
	if v, err := client(t, got).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k on the promoted replica = %q, %v", v, err)
	}
}
