// Package exclusion checks mutual exclusion in fault tests: clients record
// every critical section they ran under a lock, and the Checker fails the
// test when two holders of one key were inside at the same time while both
// still believed their lock valid.
//
// A section counts from the moment Lock returned to the earlier of the
// moment the holder left it and the lock's Until: a holder that overstays
// its validity is warned by the API (Unlock returns ErrNotHeld) and is not
// a violation of the lock. All times are read from the test process's
// monotonic clock ([time.Now]), the same clock the locker computes Until
// from, so intervals recorded by different goroutines compare exactly.
//
// Recording is causal, so back-to-back holders never look overlapping:
// Enter is called after Lock returned and Exit before Unlock is called, and
// the next holder's SET can only succeed after that Unlock deleted the key.
//
// The package does not import the lock package (the root package's tests
// use it), so callers classify failed Lock calls themselves with Fail.
package exclusion

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Outcome classifies a Lock call that did not grant the lock.
type Outcome int

const (
	// Conflict: the lock was held by someone else (ErrNotAcquired, and
	// ErrTimeout when retries ran out). Expected under contention.
	Conflict Outcome = iota
	// Unavailable: too few nodes answered (ErrUnavailable). Expected only
	// while a majority is down.
	Unavailable
	// Deadline: the caller's context ended first.
	Deadline
	// Other: any other error. Fault tests normally assert there are none.
	Other
	numOutcomes
)

func (o Outcome) String() string {
	switch o {
	case Conflict:
		return "conflict"
	case Unavailable:
		return "unavailable"
	case Deadline:
		return "deadline"
	case Other:
		return "other"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Section is one critical section: Holder held Key from Start until End,
// believing the lock valid until Until. A section under a lock on several
// keys at once (EnterMany) holds each of Keys, and Key is the set's name.
//
// A Shared section (a reader's, EnterShared) may overlap other shared
// sections of its key, never an exclusive one.
type Section struct {
	Key    string
	Keys   []string // the keys held, for a set; nil for Key alone
	Shared bool     // a reader's: overlaps other readers without violation
	Holder string
	Start  time.Time // Lock returned
	End    time.Time // left the section; zero while still inside
	Until  time.Time // the lock's validity as the holder saw it
}

// Held returns the keys the section holds.
func (s Section) Held() []string {
	if s.Keys == nil {
		return []string{s.Key}
	}
	return s.Keys
}

// ValidEnd is when the section stops counting: the earlier of End and
// Until (Until alone while the holder is still inside).
func (s Section) ValidEnd() time.Time {
	if s.End.IsZero() || s.Until.Before(s.End) {
		return s.Until
	}
	return s.End
}

// Overlap is a violation: two holders of one key, both inside and both
// believing their lock valid during [From, To). On a key with a bound
// above one (Bound), it is more holders than the bound inside at once:
// Holders are all of them (A the first, B the one whose entry broke the
// bound), and [From, To) is while more than Bound stayed inside.
type Overlap struct {
	Key      string
	A, B     Section
	From, To time.Time
	Bound    int       // the holders the key admits at once
	Holders  []Section // on a key bounded above one: every holder inside at From
}

func (o Overlap) String() string {
	if len(o.Holders) > 0 {
		names := make([]string, len(o.Holders))
		for i, s := range o.Holders {
			names[i] = s.Holder
		}
		return fmt.Sprintf("key %q: %d holders at once (bound %d): %s, for %v", o.Key, len(o.Holders), o.Bound,
			strings.Join(names, ", "), o.To.Sub(o.From))
	}
	return fmt.Sprintf("key %q: %s and %s both held it for %v", o.Key, o.A.Holder, o.B.Holder, o.To.Sub(o.From))
}

// Stats are the counts of one scenario.
type Stats struct {
	Acquisitions int // critical sections entered
	Conflicts    int
	Unavailable  int
	Deadlines    int
	Other        int
	Overlaps     int
}

func (s Stats) String() string {
	return fmt.Sprintf("acquisitions=%d conflicts=%d unavailable=%d deadlines=%d other=%d overlaps=%d",
		s.Acquisitions, s.Conflicts, s.Unavailable, s.Deadlines, s.Other, s.Overlaps)
}

// Checker collects critical sections and failed calls from any number of
// goroutines. The zero value is not usable; call New.
type Checker struct {
	mu       sync.Mutex
	sections []*Section
	bounds   map[string]int // holders admitted at once, for keys other than 1
	failed   [numOutcomes]int
	errs     []error // the first few Other errors, for the report
}

// New returns an empty Checker.
func New() *Checker { return &Checker{} }

// Enter records that holder got key and is entering its critical section
// now, with the lock valid until until. Call it right after Lock returned
// and call Exit on the result before Unlock.
func (c *Checker) Enter(key, holder string, until time.Time) *Entry {
	s := &Section{Key: key, Holder: holder, Start: time.Now(), Until: until}
	c.mu.Lock()
	c.sections = append(c.sections, s)
	c.mu.Unlock()
	return &Entry{c: c, s: s}
}

// EnterMany is Enter for a lock on several keys at once: one section (one
// acquisition) that holds every key, judged against the sections of each.
func (c *Checker) EnterMany(keys []string, holder string, until time.Time) *Entry {
	s := &Section{Key: "[" + strings.Join(keys, " ") + "]", Keys: slices.Clone(keys), Holder: holder, Start: time.Now(), Until: until}
	c.mu.Lock()
	c.sections = append(c.sections, s)
	c.mu.Unlock()
	return &Entry{c: c, s: s}
}

// EnterShared is Enter for a reader's share of key: the section may
// overlap other readers' sections of key, never a writer's (or any other
// exclusive section's).
func (c *Checker) EnterShared(key, holder string, until time.Time) *Entry {
	s := &Section{Key: key, Shared: true, Holder: holder, Start: time.Now(), Until: until}
	c.mu.Lock()
	c.sections = append(c.sections, s)
	c.mu.Unlock()
	return &Entry{c: c, s: s}
}

// Entry is a critical section in progress.
type Entry struct {
	c *Checker
	s *Section
}

// Exit records that the holder left the critical section now. Later calls
// do nothing.
func (e *Entry) Exit() {
	now := time.Now()
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	if e.s.End.IsZero() {
		e.s.End = now
	}
}

// Extend records that the holder's validity now ends at until, after a
// successful Lock.Extend (which only succeeds while the lock is still
// valid, so the validity stays one interval): the section counts until
// then.
func (e *Entry) Extend(until time.Time) {
	e.c.mu.Lock()
	defer e.c.mu.Unlock()
	e.s.Until = until
}

// Bound sets how many holders key admits at once (a semaphore's
// permits); every key admits one unless bounded otherwise. Sections of a
// semaphore's permits are entered on the semaphore's name (bounded by
// its permits) and, with EnterMany, on the permit's slot key too (one
// holder per slot). A bound below 1 admits no holder at all: every valid
// section of key is a violation.
func (c *Checker) Bound(key string, holders int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bounds == nil {
		c.bounds = map[string]int{}
	}
	c.bounds[key] = holders
}

// bound returns the holders key admits at once.
func (c *Checker) bound(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.bounds[key]; ok {
		return b
	}
	return 1
}

// Record adds a finished section with explicit times, for sections
// measured elsewhere and for testing the checker itself.
func (c *Checker) Record(s Section) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sections = append(c.sections, &s)
}

// Fail counts a Lock call that did not grant the lock. err is kept for the
// report when the outcome is Other.
func (c *Checker) Fail(o Outcome, err error) {
	if o < 0 || o >= numOutcomes {
		o = Other
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[o]++
	if o == Other && len(c.errs) < 5 {
		c.errs = append(c.errs, err)
	}
}

// Sections returns a copy of every recorded section, in recording order.
func (c *Checker) Sections() []Section {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Section, len(c.sections))
	for i, s := range c.sections {
		out[i] = *s
	}
	return out
}

// Overlaps returns the violations: on a key admitting one holder, every
// pair of sections of that key (a set's section counts for each of its
// keys), held by different holders and not both shared (readers), whose valid intervals [Start,
// ValidEnd) intersect; on a key bounded above one (Bound), every section
// whose start put more holders than the bound inside at once. Touching
// intervals (one ends exactly when the next starts) do not overlap.
func (c *Checker) Overlaps() []Overlap {
	byKey := map[string][]Section{}
	for _, s := range c.Sections() {
		for _, k := range s.Held() {
			byKey[k] = append(byKey[k], s)
		}
	}
	var out []Overlap
	for key, ss := range byKey {
		out = append(out, overlapsOf(key, c.bound(key), ss)...)
	}
	slices.SortFunc(out, func(a, b Overlap) int { return a.From.Compare(b.From) })
	return out
}

// overlapsOf judges the sections of one key.
func overlapsOf(key string, bound int, ss []Section) []Overlap {
	var out []Overlap
	sweep(ss, func(active []Section, s Section) {
		out = append(out, violations(key, bound, active, s)...)
	})
	return out
}

// sweep calls at, by start, for every section of one key with a valid
// interval, with the earlier sections still valid at its start: the
// holders inside then. The count of holders inside only grows at a
// start, so looking at every start sees every moment.
func sweep(ss []Section, at func(active []Section, s Section)) {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b Section) int { return a.Start.Compare(b.Start) })
	var active []Section // earlier sections not yet known to have ended before the current start
	for _, s := range ss {
		kept := active[:0]
		for _, a := range active {
			if a.ValidEnd().After(s.Start) {
				kept = append(kept, a)
			}
		}
		active = kept
		if s.ValidEnd().After(s.Start) {
			at(active, s)
		}
		active = append(active, s)
	}
}

// MostInside returns the most holders of key ever inside at once with
// valid sections (a set's section counts for each of its keys): with a
// bound, a run that never reached it tested the bound little.
func (c *Checker) MostInside(key string) int {
	var ss []Section
	for _, s := range c.Sections() {
		if slices.Contains(s.Held(), key) {
			ss = append(ss, s)
		}
	}
	most := 0
	sweep(ss, func(active []Section, s Section) {
		most = max(most, len(otherHolders(active, s))+1)
	})
	return most
}

// otherHolders returns one of active's sections per holder other than s's.
func otherHolders(active []Section, s Section) []Section {
	var others []Section
	for _, a := range active {
		if a.Holder != s.Holder && !slices.ContainsFunc(others, func(o Section) bool { return o.Holder == a.Holder }) {
			others = append(others, a)
		}
	}
	return others
}

// violations judges s entering while active were inside: against each
// other holder on a key of one holder (two readers, shared sections, do
// not exclude each other), as one violation when more
// holders than bound were inside on a key bounded otherwise.
func violations(key string, bound int, active []Section, s Section) []Overlap {
	if bound == 1 {
		var out []Overlap
		for _, a := range active {
			if a.Holder != s.Holder && !(a.Shared && s.Shared) {
				out = append(out, Overlap{Key: key, A: a, B: s, From: s.Start, To: earliest(a.ValidEnd(), s.ValidEnd()), Bound: 1})
			}
		}
		return out
	}
	others := otherHolders(active, s)
	if len(others) < bound {
		return nil
	}
	inside := append(others, s)
	ends := make([]time.Time, len(inside))
	for i, h := range inside {
		ends[i] = h.ValidEnd()
	}
	slices.SortFunc(ends, time.Time.Compare)
	// Too many stay inside until all but bound of them have left.
	return []Overlap{{Key: key, A: inside[0], B: s, From: s.Start, To: ends[len(inside)-max(bound, 0)-1], Bound: bound, Holders: inside}}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Stats returns the counts so far. Overlaps are computed from the sections
// recorded so far.
func (c *Checker) Stats() Stats {
	n := len(c.Overlaps())
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Acquisitions: len(c.sections),
		Conflicts:    c.failed[Conflict],
		Unavailable:  c.failed[Unavailable],
		Deadlines:    c.failed[Deadline],
		Other:        c.failed[Other],
		Overlaps:     n,
	}
}

// Report logs a one-line summary of the scenario and returns the stats,
// without judging them: for a scenario built to break exclusion, whose
// test asserts that overlaps were seen.
func (c *Checker) Report(t testing.TB, scenario string) Stats {
	t.Helper()
	st := c.Stats()
	t.Logf("%s: %v", scenario, st)
	return st
}

// Verify is Report, and fails t for every overlap (the first ten are
// described) and for every Other error: what every fault scenario that
// claims safety calls at its end.
func (c *Checker) Verify(t testing.TB, scenario string) Stats {
	t.Helper()
	st := c.Report(t, scenario)
	for i, o := range c.Overlaps() {
		if i == 10 {
			t.Errorf("%s: ... and %d more overlaps", scenario, st.Overlaps-10)
			break
		}
		t.Errorf("%s: mutual exclusion violated: %v", scenario, o)
	}
	c.mu.Lock()
	errs := slices.Clone(c.errs)
	c.mu.Unlock()
	if st.Other > 0 {
		t.Errorf("%s: %d unexpected Lock errors, first: %v", scenario, st.Other, errs)
	}
	return st
}
