package redlock

import (
	"context"
	"fmt"
	"slices"
)

// Leader is who leads an election: the value its campaign announced and
// its term. The zero Leader means "no leader" (Observe sends it when the
// leadership ends and no campaign has won yet).
type Leader struct {
	Value string
	Term  int64
}

// Leader returns who leads the election now, read from the nodes (one
// atomic read of the key and its fence counter per node, Peeker, each
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
	s := scope{key: e.name, nodes: e.lk.nodes, cfg: &e.cfg}
	peeks := make([]peek, len(s.nodes))
	r := s.fanOut(ctx, "peek", nil, func(ctx context.Context, i int, b Backend) (bool, error) {
		tok, f, err := b.(Peeker).Peek(ctx, e.name)
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
