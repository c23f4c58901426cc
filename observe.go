package redlock

import (
	"context"
	"errors"
	"time"
)

// burstStart is the first delay of the quick reads that follow a release
// announcement (see Observe); each next delay doubles.
const burstStart = time.Millisecond

// Observe streams who leads the election: first the current leader (or
// the zero Leader when nobody leads), then every change, in order. It returns a channel that is closed when ctx ends,
// and an error (matching ErrInvalid) only for a nil ctx. The goroutine
// behind the channel lives until ctx ends: cancel ctx when done, and
// keep receiving until then (a send waits for the receiver or ctx).
//
// Changes are found by reading the nodes as Leader does, which decides
// what a change is (a value and term held by a quorum, or nobody); a read
// that fails to decide (ErrUnavailable) sends nothing. Reads happen:
//
//   - at once when a node announces a release of the key (pub/sub, on
//     the nodes that are Notifiers): the leader resigned. Quick reads
//     follow, 1 ms apart and doubling, until a new leader is seen or the
//     delay reaches the poll interval, so the hand-off to a waiting
//     campaign is seen within a few milliseconds;
//   - otherwise every TTL/3 while someone leads (the poll fallback: a
//     lease that expires announces nothing, and a subscription may have
//     missed a message), and every TTL/10 while nobody leads, as often as
//     a waiting campaign retries.
//
// So "no leader" is reported within TTL/3 of the lease's expiry on the
// nodes, and a new leader within TTL/10 of its election at worst. The
// terms of the leaders reported strictly increase; a winner may be
// reported first with a lower term than its own, then with its own, when
// a read falls in its fencing round (see Leader).
//
// One exception, on a network that delivers commands late: a campaign's
// acquisition that reaches a node after the campaign resigned there puts
// its key back (the late SET of attempt.go's rollback). If that makes a
// quorum again, the resigned campaign is read as the leader once more,
// with its own term, until its TTL ends; nobody else can win meanwhile,
// since the key is held. Observe then reports it again, after the "no
// leader" between: the same value and term, never a lower term
// (TestElectionNemesis sees it).
func (e *Election) Observe(ctx context.Context) (<-chan Leader, error) {
	if ctx == nil {
		return nil, invalidf("Observe: nil context")
	}
	out := make(chan Leader)
	notice := make(chan struct{}, 1)
	stop := e.subscribe(ctx, notice)
	go e.observe(ctx, out, notice, stop)
	return out, nil
}

// subscribe listens for release announcements of the key on every node
// that can notify: each one sends on notice, which never blocks. It
// returns the function that unsubscribes.
func (e *Election) subscribe(ctx context.Context, notice chan<- struct{}) func() {
	s := scope{key: e.name, what: oneKey{}, nodes: e.lk.nodes, cfg: &e.cfg}
	stops := make([]func(), len(s.nodes))
	s.fanOut(ctx, "watch", errNoNotifier, func(ctx context.Context, i int, b Backend) (bool, error) {
		n, ok := b.(Notifier)
		if !ok {
			return false, nil
		}
		stop, err := n.Notify(ctx, e.name, func(string) {
			select {
			case notice <- struct{}{}:
			default:
			}
		})
		stops[i] = stop
		return err == nil, err
	})
	return func() {
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
	}
}

// observe is Observe's goroutine.
func (e *Election) observe(ctx context.Context, out chan<- Leader, notice <-chan struct{}, stop func()) {
	defer close(out)
	defer stop()
	var (
		last  Leader
		sent  bool          // last was sent
		burst time.Duration // the next quick read's delay; 0: not bursting
	)
	for {
		cur, err := e.read(ctx)
		if err == nil || errors.Is(err, ErrNoLeader) {
			if !sent || cur != last {
				select {
				case out <- cur:
				case <-ctx.Done():
					return
				}
				if cur != (Leader{}) {
					burst = 0 // the new leader is seen
				}
				last, sent = cur, true
			}
		}
		next := e.pollEvery(last)
		if burst > 0 {
			if burst < next {
				next, burst = burst, burst*2
			} else {
				burst = 0
			}
		}
		noticed, ok := await(ctx, notice, next)
		if !ok {
			return
		}
		if noticed {
			burst = burstStart
		}
	}
}

// await waits d, or less when a release is announced (noticed). It
// reports ok = false when ctx ended.
func await(ctx context.Context, notice <-chan struct{}, d time.Duration) (noticed, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, false
	case <-notice:
		return true, true
	case <-t.C:
		return false, true
	}
}

// pollEvery is the poll interval: TTL/3 while someone leads, the
// campaigns' retry interval while nobody does.
func (e *Election) pollEvery(last Leader) time.Duration {
	if last == (Leader{}) {
		return e.retry
	}
	return max(e.cfg.ttl/3, time.Millisecond)
}
