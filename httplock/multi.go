package httplock

import (
	"fmt"
	"net/http"

	"github.com/quorumlock/redlock"
)

// Several records at once: a route that writes to more than one record
// (a transfer between two accounts) locks them all, all or nothing, with
// redlock's DoMany, so it excludes every request that writes to any of
// them, alone or with others, and two opposite transfers never deadlock.

// A RecordsFunc names the records a request writes to together. It
// follows RecordFunc's rules: ok = false runs the request WITHOUT a lock;
// ok = true with no records, or with a record whose parts cannot make a
// key, is refused with 400. Duplicates (a transfer from an account to
// itself) are locked once.
type RecordsFunc func(r *http.Request) (recs []Record, ok bool)

// PathRecords returns a RecordsFunc for routes with one wildcard per
// record, all of one endpoint:
//
//	mux.Handle("POST /accounts/{from}/transfers/{to}", mw.Wrap(transfer))
//	... httplock.PathRecords("bank", "account", "from", "to")
//
// Each wildcard follows PathRecord's rules (an empty id is 400, a
// wildcard the route does not have is 500). It returns nil, which NewMany
// refuses, for no wildcards or any argument PathRecord would refuse.
func PathRecords(project, endpoint string, wildcards ...string) RecordsFunc {
	if len(wildcards) == 0 {
		return nil
	}
	one := make([]RecordFunc, len(wildcards))
	for i, wc := range wildcards {
		if one[i] = PathRecord(project, endpoint, wc); one[i] == nil {
			return nil
		}
	}
	return func(r *http.Request) ([]Record, bool) {
		recs := make([]Record, len(one))
		for i, f := range one {
			recs[i], _ = f(r) // PathRecord's ok is always true
		}
		return recs, true
	}
}

// NewMany returns a Middleware that locks through locker every record
// that records names, all or nothing (redlock's DoMany); otherwise it is
// New, with the same options and responses. The keys are those New's
// Middleware takes for each record alone (KeySpace.Write), so a route
// locking one record and a route locking it with others exclude each
// other. A Redis Cluster node holds a set only in one hash slot, which
// these keys do not share: use standalone masters (or Sentinel) for
// routes on several records. A nil locker or records is an error matching
// redlock.ErrInvalid.
func NewMany(locker redlock.Locker, records RecordsFunc, opts ...Option) (*Middleware, error) {
	if records == nil {
		return nil, fmt.Errorf("%w: httplock: nil RecordsFunc (PathRecords returns nil for no wildcards, "+
			"a wildcard that is not a valid name, or a project or endpoint that is empty or contains ':')", redlock.ErrInvalid)
	}
	if locker == nil {
		return nil, fmt.Errorf("%w: httplock: nil locker", redlock.ErrInvalid)
	}
	m, err := New(locker, func(*http.Request) (Record, bool) { return Record{}, false }, opts...)
	if err != nil {
		return nil, err
	}
	if m.rw != nil {
		return nil, fmt.Errorf("%w: httplock: WithReadLocks is for New's one record per request, not NewMany", redlock.ErrInvalid)
	}
	m.records, m.sets = records, locker
	return m, nil
}

// recordKeys returns the lock keys of the records a request names, or
// ok = false when it names none on purpose (run unlocked).
func (m *Middleware) recordKeys(r *http.Request) (keys []string, ok bool, err error) {
	recs, ok := m.records(r)
	if !ok {
		return nil, false, nil
	}
	if len(recs) == 0 {
		return nil, true, fmt.Errorf("%w: the RecordsFunc named no record", ErrBadRecord)
	}
	keys = make([]string, len(recs))
	for i, rec := range recs {
		if rec.err != nil {
			return nil, true, rec.err
		}
		if keys[i], err = m.keys.Write(rec.Project, rec.Endpoint, rec.ID); err != nil {
			return nil, true, fmt.Errorf("%w: %w", ErrBadRecord, err)
		}
	}
	return keys, true, nil
}
