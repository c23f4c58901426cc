package redlock_test

import (
	"context"
	"fmt"
	"github.com/quorumlock/redlock/driver"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/testwait"
)

// BenchmarkLeaderFailover measures how long an election goes without a
// leader when the leader's process dies: its clients are closed (it can
// no longer renew, nor resign), a standby campaigns on other connections,
// and an observer watches. One op is one fail-over, on real redis-server
// processes (1 and 3), for several TTLs. Reported, from the kill:
//
//   - elected-ms: until the standby's Campaign returned (the lease expires
//     within the TTL, then the standby's next retry, every TTL/10, wins);
//
//   - observed-ms: until the observer's Observe reported the standby
//     (it sees "no leader" at its next poll, every TTL/3 while a leader is
//     seen, then polls every TTL/10);
//
//   - elected/ttl, observed/ttl: the same as fractions of the TTL.
//
//     go test -run '^$' -bench BenchmarkLeaderFailover -benchtime 10x
func BenchmarkLeaderFailover(b *testing.B) {
	for _, n := range []int{1, 3} {
		for _, ttl := range []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second} {
			b.Run(fmt.Sprintf("N=%d/ttl=%v", n, ttl), func(b *testing.B) { benchFailover(b, n, ttl) })
		}
	}
}

func benchFailover(b *testing.B, n int, ttl time.Duration) {
	c := redistest.Start(b, n)
	s := servers{addrs: c.Addrs()}
	for _, addr := range s.addrs {
		s.bs = append(s.bs, node(b, redistest.Client(b, addr)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := benchElection(b, s.bs, ttl).Observe(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var elected, observed time.Duration
	b.ResetTimer()
	for i := range b.N {
		e, o := failoverOnce(b, s, ttl, events, i)
		elected += e
		observed += o
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(elected), "elected-ms")
	b.ReportMetric(ms(observed), "observed-ms")
	b.ReportMetric(float64(elected)/float64(ttl)/float64(b.N), "elected/ttl")
	b.ReportMetric(float64(observed)/float64(ttl)/float64(b.N), "observed/ttl")
}

// failoverOnce elects a leader on connections of its own, puts a standby
// in line, kills the leader, and returns how long the standby took to
// win and the observer to report it.
func failoverOnce(b *testing.B, s servers, ttl time.Duration, events <-chan redlock.Leader, i int) (elected, observed time.Duration) {
	killBs, kill := s.killable(b)
	leader, err := benchElection(b, killBs, ttl).Campaign(context.Background(), fmt.Sprintf("leader-%d", i))
	if err != nil {
		b.Fatal(err)
	}
	waitObserved(b, events, leader.Value())
	lk := benchLocker(b, s.bs, ttl)
	standby, err := redlock.NewElection(lk, "{bench}", redlock.WithTTL(ttl))
	if err != nil {
		b.Fatal(err)
	}
	won := make(chan *redlock.Leadership, 1)
	go func() {
		l, err := standby.Campaign(context.Background(), fmt.Sprintf("standby-%d", i))
		if err != nil {
			b.Error(err)
		}
		won <- l
	}()
	testwait.Until(b, "the standby waiting", func() bool { return redlock.InLine(lk, "{bench}") == 1 })
	start := time.Now()
	kill()
	l := <-won
	elected = time.Since(start)
	waitObserved(b, events, l.Value())
	observed = time.Since(start)
	_ = l.Resign(context.Background())
	<-leader.Lost() // its renewal failed: the heartbeat has ended
	return elected, observed
}

// waitObserved reads events until value leads.
func waitObserved(b *testing.B, events <-chan redlock.Leader, value string) {
	for l := range events {
		if l.Value == value {
			return
		}
	}
	b.Fatal("Observe ended")
}

func benchLocker(b *testing.B, bs []driver.Node, ttl time.Duration) *redlock.Redlock {
	lk, err := redlock.New(bs, redlock.WithTTL(ttl))
	if err != nil {
		b.Fatal(err)
	}
	return lk
}

func benchElection(b *testing.B, bs []driver.Node, ttl time.Duration) *redlock.Election {
	e, err := redlock.NewElection(benchLocker(b, bs, ttl), "{bench}", redlock.WithTTL(ttl))
	if err != nil {
		b.Fatal(err)
	}
	return e
}
