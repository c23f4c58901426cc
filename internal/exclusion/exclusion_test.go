package exclusion

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func sec(key, holder string, start, end, until int) Section {
	return Section{Key: key, Holder: holder, Start: at(start), End: at(end), Until: at(until)}
}

func TestOverlapDetected(t *testing.T) {
	c := New()
	c.Record(sec("k", "a", 0, 100, 1000))
	c.Record(sec("k", "b", 50, 150, 1000))
	ov := c.Overlaps()
	require.Len(t, ov, 1)
	assert.Equal(t, "a", ov[0].A.Holder)
	assert.Equal(t, "b", ov[0].B.Holder)
	assert.Equal(t, at(50), ov[0].From)
	assert.Equal(t, at(100), ov[0].To)
	assert.Equal(t, 1, c.Stats().Overlaps)
}

func TestBackToBackAccepted(t *testing.T) {
	c := New()
	c.Record(sec("k", "a", 0, 100, 1000))
	c.Record(sec("k", "b", 100, 200, 1100)) // starts exactly when a left
	c.Record(sec("k", "c", 250, 300, 1250))
	assert.Empty(t, c.Overlaps())
}

func TestOverstayPastUntilIsNotAnOverlap(t *testing.T) {
	// a kept working after its validity ended; b took the key after that.
	// The lock promised nothing to a past its Until.
	c := New()
	c.Record(sec("k", "a", 0, 500, 300))
	c.Record(sec("k", "b", 300, 400, 1300))
	assert.Empty(t, c.Overlaps())

	// But b entering while a was still valid is a violation.
	c.Record(sec("k", "c", 299, 310, 1299))
	assert.Len(t, c.Overlaps(), 2, "c overlaps a (valid until 300) and b")
}

func TestKeysAndHoldersAreIndependent(t *testing.T) {
	c := New()
	c.Record(sec("k1", "a", 0, 100, 1000))
	c.Record(sec("k2", "b", 0, 100, 1000))
	assert.Empty(t, c.Overlaps(), "different keys")

	c.Record(sec("k3", "x", 0, 100, 1000))
	c.Record(sec("k3", "x", 50, 80, 1000))
	assert.Empty(t, c.Overlaps(), "a holder does not overlap itself")
}

func TestLongSectionOverlapsManyLater(t *testing.T) {
	// The sweep must keep a long section active past shorter ones.
	c := New()
	c.Record(sec("k", "long", 0, 1000, 2000))
	c.Record(sec("k", "s1", 10, 20, 2000))
	c.Record(sec("k", "s2", 30, 40, 2000))
	c.Record(sec("k", "s3", 990, 995, 2000))
	ov := c.Overlaps()
	require.Len(t, ov, 3)
	for _, o := range ov {
		assert.Equal(t, "long", o.A.Holder)
	}
}

func TestStillInsideCountsUntilValidityEnds(t *testing.T) {
	c := New()
	c.Record(Section{Key: "k", Holder: "a", Start: at(0), Until: at(1000)}) // never exited
	c.Record(sec("k", "b", 999, 1001, 2000))
	assert.Len(t, c.Overlaps(), 1)
}

func TestEnterExitConcurrently(t *testing.T) {
	// Holders that take turns through a real mutex never overlap; the
	// same holders without it do.
	for _, exclusive := range []bool{true, false} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			c := New()
			var mu sync.Mutex
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 4 {
				wg.Go(func() {
					<-start
					for range 20 {
						if exclusive {
							mu.Lock()
						}
						e := c.Enter("k", fmt.Sprint("w", i), time.Now().Add(time.Hour))
						time.Sleep(200 * time.Microsecond)
						e.Exit()
						if exclusive {
							mu.Unlock()
						}
					}
				})
			}
			close(start)
			wg.Wait()
			st := c.Stats()
			assert.Equal(t, 80, st.Acquisitions)
			if exclusive {
				assert.Zero(t, st.Overlaps)
			} else {
				assert.Positive(t, st.Overlaps, "four goroutines sleeping inside without a lock must overlap")
			}
		})
	}
}

func TestExitTwiceKeepsFirst(t *testing.T) {
	c := New()
	e := c.Enter("k", "a", time.Now().Add(time.Hour))
	e.Exit()
	first := c.Sections()[0].End
	time.Sleep(time.Millisecond)
	e.Exit()
	assert.Equal(t, first, c.Sections()[0].End)
}

func TestExtendMovesValidity(t *testing.T) {
	c := New()
	c.Enter("plain", "a", time.Now().Add(20*time.Millisecond))
	extended := c.Enter("extended", "a", time.Now().Add(20*time.Millisecond))
	extended.Extend(time.Now().Add(time.Hour)) // while still valid, as Lock.Extend requires
	time.Sleep(30 * time.Millisecond)
	c.Enter("plain", "b", time.Now().Add(time.Hour)).Exit()
	c.Enter("extended", "b", time.Now().Add(time.Hour)).Exit()
	ov := c.Overlaps()
	require.Len(t, ov, 1, "b entered after a's first validity, inside its extended one")
	assert.Equal(t, "extended", ov[0].A.Key)
}

func TestFailCounts(t *testing.T) {
	c := New()
	c.Fail(Conflict, nil)
	c.Fail(Conflict, nil)
	c.Fail(Unavailable, nil)
	c.Fail(Deadline, nil)
	c.Fail(Outcome(42), errors.New("weird")) // out of range counts as Other
	c.Enter("k", "a", time.Now().Add(time.Hour)).Exit()
	st := c.Stats()
	assert.Equal(t, Stats{Acquisitions: 1, Conflicts: 2, Unavailable: 1, Deadlines: 1, Other: 1}, st)
	assert.Equal(t, "acquisitions=1 conflicts=2 unavailable=1 deadlines=1 other=1 overlaps=0", st.String())
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errors []string
	logs   []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, a...))
}
func (r *recorder) Logf(format string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(format, a...)) }

func TestVerifyFailsOnOverlapAndOtherErrors(t *testing.T) {
	c := New()
	c.Record(sec("k", "a", 0, 100, 1000))
	c.Record(sec("k", "b", 50, 150, 1000))
	c.Fail(Other, errors.New("boom"))
	r := &recorder{TB: t}
	st := c.Verify(r, "scenario")
	assert.Equal(t, 1, st.Overlaps)
	require.Len(t, r.errors, 2)
	assert.Contains(t, r.errors[0], "mutual exclusion violated")
	assert.Contains(t, r.errors[1], "boom")
	require.Len(t, r.logs, 1)
	assert.Contains(t, r.logs[0], "scenario: acquisitions=2")

	ok := New()
	ok.Record(sec("k", "a", 0, 100, 1000))
	r = &recorder{TB: t}
	ok.Verify(r, "clean")
	assert.Empty(t, r.errors)

	r = &recorder{TB: t}
	c.Report(r, "broken on purpose")
	assert.Empty(t, r.errors, "Report only logs")
}

// TestSetsOverlapPerKey: a section holding several keys overlaps a
// section of any of them, single or set, and none of the others.
func TestSetsOverlapPerKey(t *testing.T) {
	c := New()
	set := sec("", "s", 0, 100, 1000)
	set.Keys = []string{"a", "b"}
	c.Record(set)
	c.Record(sec("c", "x", 10, 50, 1000)) // another key
	other := sec("", "y", 60, 80, 1000)
	other.Keys = []string{"b", "c"}
	c.Record(other)
	c.Record(sec("a", "z", 90, 120, 1000))
	ov := c.Overlaps()
	require.Len(t, ov, 2)
	assert.Equal(t, "b", ov[0].Key)
	assert.Equal(t, "y", ov[0].B.Holder)
	assert.Equal(t, "a", ov[1].Key)
	assert.Equal(t, "z", ov[1].B.Holder)
	assert.Equal(t, 4, c.Stats().Acquisitions, "a set is one acquisition")

	e := c.EnterMany([]string{"c", "d"}, "m", time.Now().Add(time.Hour))
	e.Exit()
	s := c.Sections()[4]
	assert.Equal(t, "[c d]", s.Key)
	assert.Equal(t, []string{"c", "d"}, s.Held())
}

// TestBoundAdmitsUpToItsHolders: a key bounded at two (a semaphore of two
// permits) admits two holders at once and reports the third, once, with
// everyone inside and how long there were too many.
func TestBoundAdmitsUpToItsHolders(t *testing.T) {
	c := New()
	c.Bound("sem", 2)
	c.Record(sec("sem", "a", 0, 100, 1000))
	c.Record(sec("sem", "b", 50, 150, 1000))
	c.Record(sec("sem", "c", 100, 200, 1000)) // a left as c entered: two inside
	assert.Empty(t, c.Overlaps(), "two holders at once are within the bound")
	assert.Equal(t, 2, c.MostInside("sem"), "the bound was reached")

	c.Record(sec("sem", "d", 120, 130, 1000)) // b, c and d inside
	ov := c.Overlaps()
	require.Len(t, ov, 1)
	assert.Equal(t, 2, ov[0].Bound)
	assert.Equal(t, "d", ov[0].B.Holder)
	assert.ElementsMatch(t, []string{"b", "c", "d"}, holders(ov[0].Holders))
	assert.Equal(t, at(120), ov[0].From)
	assert.Equal(t, at(130), ov[0].To, "three inside until d left")
	assert.Contains(t, ov[0].String(), "3 holders at once (bound 2)")
	assert.Equal(t, 3, c.MostInside("sem"))
	assert.Equal(t, 1, c.Stats().Overlaps)
}

// TestBoundCountsValidityNotPresence: a holder past its Until no longer
// counts, one holder's own sections count once, and a bound of zero
// admits no one.
func TestBoundCountsValidityNotPresence(t *testing.T) {
	c := New()
	c.Bound("sem", 2)
	c.Record(sec("sem", "a", 0, 500, 100)) // overstays its validity
	c.Record(sec("sem", "b", 50, 300, 1000))
	c.Record(sec("sem", "b", 60, 70, 1000)) // b inside twice: still one holder
	c.Record(sec("sem", "c", 100, 300, 1000))
	assert.Empty(t, c.Overlaps())
	assert.Equal(t, 2, c.MostInside("sem"), "a past its validity, b once")

	c.Bound("none", 0)
	c.Record(sec("none", "x", 0, 10, 1000))
	require.Len(t, c.Overlaps(), 1)
}

// TestBoundOnSemaphoreAndSlots: a permit's section is entered on the
// semaphore's name and its slot: the name is judged by the bound, each
// slot by mutual exclusion, so two holders of one slot are caught even
// within the bound.
func TestBoundOnSemaphoreAndSlots(t *testing.T) {
	c := New()
	c.Bound("sem", 2)
	c.EnterMany([]string{"sem", "sem:permit:0"}, "a", time.Now().Add(time.Hour))
	c.EnterMany([]string{"sem", "sem:permit:1"}, "b", time.Now().Add(time.Hour)).Exit()
	assert.Empty(t, c.Overlaps())
	c.EnterMany([]string{"sem", "sem:permit:0"}, "c", time.Now().Add(time.Hour))
	ov := c.Overlaps()
	require.Len(t, ov, 1, "within the bound of the name, two holders of one slot")
	assert.Equal(t, "sem:permit:0", ov[0].Key)

	r := &recorder{TB: t}
	c.Verify(r, "semaphore")
	assert.Len(t, r.errors, 1, "Verify fails on it")
}

func holders(ss []Section) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Holder
	}
	return out
}

// TestSharedSections: readers' sections of a key overlap each other
// freely; a reader and an exclusive section (a writer) overlapping is a
// violation, either way round.
func TestSharedSections(t *testing.T) {
	c := New()
	r1 := sec("k", "r1", 0, 100, 1000)
	r1.Shared = true
	r2 := sec("k", "r2", 50, 150, 1000)
	r2.Shared = true
	c.Record(r1)
	c.Record(r2)
	assert.Empty(t, c.Overlaps(), "readers share")
	c.Record(sec("k", "w", 120, 200, 1000))
	ov := c.Overlaps()
	require.Len(t, ov, 1, "the writer overlaps the second reader")
	assert.Equal(t, "r2", ov[0].A.Holder)
	assert.Equal(t, "w", ov[0].B.Holder)

	c2 := New()
	c2.Record(sec("k", "w", 0, 100, 1000))
	in := c2.EnterShared("k", "r", at(2000))
	in.Exit()
	assert.True(t, c2.Sections()[1].Shared)
	c2.Record(Section{Key: "k", Shared: true, Holder: "r0", Start: at(50), End: at(60), Until: at(1000)})
	assert.Len(t, c2.Overlaps(), 1, "a reader inside a writer's section")
}
