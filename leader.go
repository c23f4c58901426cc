package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Leader is who leads an election: the value its campaign announced and
// its term. The zero Leader means "no leader" (Observe sends it when the
// leadership ends and no campaign has won yet).
type Leader struct {
	Value string
	Term  int64
}

// Leader returns who leads the election now, read from the nodes (one
// atomic read of the key and its fence counter per node, peek.lua, each
// bounded by the per-node timeout):
//
//   - a campaign leads when a quorum of the nodes hold its token, and a
//     quorum of those hold the same fence counter beside it: that
//     counter is its term, exactly the term its Leadership reports once
//     the campaign's fencing round is done (docs/election.md). A token
//     that a minority holds is never reported: a minority view can belong
//     to an attempt that lost, while another campaign holds the key on a
//     quorum. A token on a quorum whose counters do not agree yet (the
//     winner's fencing round is under way) is not reported either.
//   - otherwise ErrNoLeader, or an error matching ErrUnavailable when the
//     nodes that did not answer could have made a quorum for someone.
//
// The terms Leader reports strictly increase from one campaign to the
// next, including when one read follows another in real time across
// processes. A campaign that reached a quorum and is then rolled back
// (its validity ran out during its round) can be read as the leader for
// the duration of that round; its term is still greater than every
// earlier one reported, and smaller than every later one. During the
// winner's fencing round a read may report it with a lower term than its
// final one, and then with the final one.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if ctx == nil {
		return Leader{}, invalidf("Leader: nil context")
	}
	return e.read(ctx)
}

// peek is one node's answer to a read.
type peek struct {
	token string
	fence int64
}

// read asks every node for the key's token and counter and decides.
func (e *Election) read(ctx context.Context) (Leader, error) {
	s := scope{key: e.name, what: oneKey{}, nodes: e.lk.nodes, cfg: &e.cfg}
	peeks := make([]peek, len(s.nodes))
	r := s.fanOut(ctx, "peek", nil, func(ctx context.Context, i int, n *node) (bool, error) {
		tok, f, err := n.peek(ctx, e.name)
		peeks[i] = peek{tok, f}
		return true, err
	})
	return decide(e.name, peeks, r.errs)
}

// decide turns the nodes' answers into the leader, ErrNoLeader or
// ErrUnavailable.
func decide(key string, peeks []peek, errs []error) (Leader, error) {
	q := quorum(len(peeks))
	fences := map[string][]int64{} // by token, the counters of its holders
	unknown := 0
	for i, p := range peeks {
		switch {
		case errs[i] != nil:
			unknown++
		case p.token != "":
			fences[p.token] = append(fences[p.token], p.fence)
		}
	}
	best := 0
	for tok, fs := range fences {
		best = max(best, len(fs))
		if len(fs) < q {
			continue
		}
		value, ok := tokenValue(tok)
		if !ok {
			return Leader{}, fmt.Errorf("%w: %q is held by a lock that is not a campaign's", ErrNoLeader, key)
		}
		term, ok := agreed(fs, q)
		if !ok {
			return Leader{}, fmt.Errorf("%w: %q: a campaign holds a quorum, its fencing round is under way", ErrNoLeader, key)
		}
		return Leader{Value: value, Term: term}, nil
	}
	if best+unknown >= q {
		return Leader{}, fmt.Errorf("%w: reading %q: %d of %d nodes did not answer", ErrUnavailable, key, unknown, len(peeks))
	}
	return Leader{}, fmt.Errorf("%w: %q is held by no campaign on a quorum of %d nodes", ErrNoLeader, key, len(peeks))
}

// agreed returns the counter that at least q of fences share, if any (at
// most one can: two sets of q nodes intersect).
func agreed(fences []int64, q int) (int64, bool) {
	slices.Sort(fences)
	for i := 0; i+q <= len(fences); i++ {
		if fences[i] == fences[i+q-1] {
			return fences[i], true
		}
	}
	return 0, false
}

// tokenValue returns the value in a campaign's token.
func tokenValue(token string) (string, bool) {
	if len(token) <= tokenRandomLen+1 || token[tokenRandomLen] != tokenSeparator {
		return "", false
	}
	return token[tokenRandomLen+1:], true
}

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
//     the nodes that are driver.Subscribers): the leader resigned. Quick reads
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
	s.fanOut(ctx, "watch", errNoNotifier, func(ctx context.Context, i int, n *node) (bool, error) {
		if n.sub == nil {
			return false, nil
		}
		stop, err := n.notify(ctx, []string{e.name}, "", func(string) {
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
