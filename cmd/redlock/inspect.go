package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock/envconfig"
	"github.com/redis/go-redis/v9"
)

const inspectUsage = `usage: redlock inspect (--key K | --prefix P) [--addrs host:port,...] [--json] [--watch D] [--limit 100] [--timeout 1s] [--full-tokens]

Shows a lock as the masters see it. For each key, per master: whether it is
held and by which token (its first 8 characters), the time it has left
(PTTL), its fence counter (K:fence, kept by WithFencing; "-" when none) and
how many connections wait on its release channel (PUBSUB NUMSUB of
redlock:released:K; the goredis adapter uses one per waiting process and
master, however many goroutines wait in it). Then the verdict:

  held      a quorum (N/2+1) of masters hold the key with one token. Valid
            for: the time a quorum still holds it (the quorum-th longest
            remaining TTL among the masters holding that token), minus the
            time the inspection took and the default drift allowance (1% of
            that time + 2 ms), as Lock computes a lock's validity
  not held  no token holds a quorum, even counting every master that did
            not answer as holding it
  unknown   masters that did not answer could make a quorum

It never writes: per master it sends one MULTI/EXEC of GET K, PTTL K,
GET K:fence and PUBSUB NUMSUB for all the keys (so each master's figures
are one snapshot) and, for --prefix, SCAN 0 MATCH P* COUNT 100 TYPE string.
--prefix lists every key found under P on any master, except fence
counters (…:fence), sorted, at most --limit of them (it says so when it
left some out). When a quorum of masters answered the scan, every key a
quorum holds is among them.

Masters: as for redlock run: --addrs (host:port or redis:// URLs), else
LOCK_DISTRIBUTED_NODES. They are shown as host:port, never with user info.

--json prints each inspection as one JSON object on one line (see
inspectReport in cmd/redlock/inspect.go): {"time", "masters", "quorum",
"prefix", "truncated", "scan_errors": [{"master", "error"}], "keys": [{"key",
"masters": [{"master", "error", "held", "token", "ttl_ms", "fence",
"waiters"}], "verdict": {"state": "held"|"not held"|"unknown", "token",
"holders", "answered", "valid_ms", "why"}}]}. ttl_ms and valid_ms are -1
for a key without expiry.

--watch D inspects again every D until SIGINT or SIGTERM.

It succeeds (0) when every verdict is known (held or not held), and exits
with 69 when some verdict is unknown, or fewer than a quorum of masters
answered the scan of --prefix (the report is printed all the same).
--watch exits with the status of its last report (130 before the first).
`

// Defaults of inspect's verdict, the library's own (redlock options.go
// and clock.go): the default drift factor, plus 2 ms for the millisecond
// granularity of Redis expiry.
const (
	inspectDriftFactor = 0.01
	inspectGranularity = 2 * time.Millisecond
	// scanCount is SCAN's COUNT; maxScanCalls bounds a scan of one
	// master (1,000,000 keys looked at) when few keys match.
	scanCount    = 100
	maxScanCalls = 10000
)

// The verdict states.
const (
	stateHeld    = "held"
	stateNotHeld = "not held"
	stateUnknown = "unknown"
)

// inspectReport is one inspection: what --json prints, one per line.
type inspectReport struct {
	Time       time.Time     `json:"time"`                  // when the inspection started
	Masters    []string      `json:"masters"`               // host:port, in the order given
	Quorum     int           `json:"quorum"`                // N/2+1
	Prefix     string        `json:"prefix,omitempty"`      // --prefix
	Truncated  bool          `json:"truncated,omitempty"`   // --prefix matched more than --limit keys
	ScanErrors []masterError `json:"scan_errors,omitempty"` // masters whose SCAN failed
	Keys       []keyReport   `json:"keys"`                  // sorted by key
}

type masterError struct {
	Master string `json:"master"`
	Error  string `json:"error"`
}

// keyReport is one key on every master, and the verdict.
type keyReport struct {
	Key     string        `json:"key"`
	Masters []masterState `json:"masters"` // in the order given
	Verdict verdict       `json:"verdict"`
}

// masterState is one key on one master.
type masterState struct {
	Master  string `json:"master"`
	Error   string `json:"error,omitempty"` // the master did not answer ("timeout", or the client's error); nothing else is set
	Held    bool   `json:"held"`
	Token   string `json:"token,omitempty"`  // shortened unless --full-tokens
	TTLMs   int64  `json:"ttl_ms,omitempty"` // PTTL while held; -1 for no expiry
	Fence   int64  `json:"fence"`            // the fence counter K:fence; 0 when there is none
	Waiters int64  `json:"waiters"`          // subscribers of redlock:released:K
	token   string // whole, for the verdict
}

// verdict says whether a quorum holds the key.
type verdict struct {
	State    string `json:"state"`           // stateHeld, stateNotHeld or stateUnknown
	Token    string `json:"token,omitempty"` // the token held on the most masters (shortened)
	Holders  int    `json:"holders"`         // masters holding Token
	Answered int    `json:"answered"`        // masters that answered
	ValidMs  int64  `json:"valid_ms"`        // held: validity left (see the usage); -1 for no expiry; else 0
	Why      string `json:"why"`             // the verdict in a sentence
}

// inspectFlags are inspect's parsed flags.
type inspectFlags struct {
	key, prefix string
	json, full  bool
	watch       time.Duration
	limit       int
	timeout     time.Duration
}

// inspect is the redlock inspect subcommand.
func inspect(args []string) int {
	return inspectWith(context.Background(), args, os.Stdout, os.Stderr, os.LookupEnv)
}

// inspectWith is inspect with its environment passed in, for tests.
func inspectWith(parent context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := newFlags("inspect", inspectUsage, stdout, stderr)
	var (
		f     inspectFlags
		addrs string
	)
	fs.StringVar(&f.key, "key", "", "the lock's key")
	fs.StringVar(&f.prefix, "prefix", "", "inspect every key that starts with this (found with SCAN)")
	fs.StringVar(&addrs, "addrs", "", "comma-separated masters, host:port or redis:// URLs (default: $"+envconfig.VarNodes+")")
	fs.Bool(&f.json, "json", "print one JSON object per inspection")
	fs.Duration(&f.watch, "watch", 0, false, "inspect again every D until interrupted (0: once)")
	fs.Int(&f.limit, "limit", 100, 1, 100, "--prefix: the most keys to show")
	fs.Duration(&f.timeout, "timeout", time.Second, true, "how long to wait for each master's answer")
	fs.Bool(&f.full, "full-tokens", "show tokens whole (whoever has a token can release the lock: do not paste them around)")
	if status, ok := fs.parse(args); !ok {
		return status
	}
	usage := fs.usage
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case (f.key == "") == (f.prefix == ""):
		return usage("give exactly one of --key and --prefix")
	}
	ms, err := openMasters(addrs, lookup, f.timeout)
	if err != nil {
		return usage("%v", err)
	}
	defer closeMasters(ms)

	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	status := exitInterrupted
	for {
		rep := inspectOnce(ctx, ms, f)
		if ctx.Err() != nil { // interrupted during the round: its figures mean nothing
			return status
		}
		if status != exitInterrupted && !f.json {
			fmt.Fprintln(stdout) // a blank line between reports
		}
		status = rep.status()
		if err := rep.write(stdout, f.json); err != nil {
			fmt.Fprintf(stderr, "redlock inspect: %v\n", err)
			return exitFailure
		}
		if f.watch == 0 {
			return status
		}
		t := time.NewTimer(f.watch)
		select {
		case <-ctx.Done():
			t.Stop()
			return status
		case <-t.C:
		}
	}
}

// inspectOnce makes one report: the keys (scanned for with --prefix),
// then every key on every master.
func inspectOnce(ctx context.Context, ms []master, f inspectFlags) *inspectReport {
	rep := &inspectReport{Time: time.Now(), Quorum: quorum(len(ms)), Prefix: f.prefix, Keys: []keyReport{}}
	for _, m := range ms {
		rep.Masters = append(rep.Masters, m.name)
	}
	keys := []string{f.key}
	if f.prefix != "" {
		keys = rep.scan(ctx, ms, f)
	}
	if len(keys) == 0 {
		return rep
	}
	start := time.Now()
	states := make([][]masterState, len(ms)) // [master][key]
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { states[i] = readMaster(ctx, m, keys, f) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	for k, key := range keys {
		kr := keyReport{Key: key}
		for i := range ms {
			kr.Masters = append(kr.Masters, states[i][k])
		}
		kr.Verdict = decide(kr.Masters, rep.Quorum, elapsed, f.full)
		rep.Keys = append(rep.Keys, kr)
	}
	return rep
}

// scan returns the keys under the prefix on any master, sorted, at most
// f.limit of them, and notes the masters whose scan failed and whether
// keys were left out.
func (rep *inspectReport) scan(ctx context.Context, ms []master, f inspectFlags) []string {
	found := make([][]string, len(ms))
	complete := make([]bool, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { found[i], complete[i], errs[i] = scanMaster(ctx, m, f) })
	}
	wg.Wait()
	var keys []string
	for i, m := range ms {
		if errs[i] != nil {
			rep.ScanErrors = append(rep.ScanErrors, masterError{m.name, nodeError(errs[i])})
			continue
		}
		keys = append(keys, found[i]...)
		rep.Truncated = rep.Truncated || !complete[i]
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) > f.limit {
		keys, rep.Truncated = keys[:f.limit], true
	}
	return keys
}

// scanMaster finds the string keys under the prefix on one master, fence
// counters excepted. It stops early (complete false) once it has more than
// f.limit of them or after maxScanCalls calls; each call is bounded by
// f.timeout.
func scanMaster(ctx context.Context, m master, f inspectFlags) (keys []string, complete bool, err error) {
	pattern := globEscape(f.prefix) + "*"
	seen := map[string]bool{}
	var cursor uint64
	for range maxScanCalls {
		cctx, cancel := context.WithTimeout(ctx, f.timeout)
		batch, next, err := m.c.ScanType(cctx, cursor, pattern, scanCount, "string").Result()
		cancel()
		if err != nil {
			return nil, false, err
		}
		for _, k := range batch {
			if !strings.HasSuffix(k, fenceSuffix) && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if len(keys) > f.limit {
			return keys, false, nil
		}
		if cursor = next; cursor == 0 {
			return keys, true, nil
		}
	}
	return keys, false, nil
}

// fenceSuffix names a lock key's fence counter, and releasePrefix starts
// the channel a release is announced on: names the core gives them on
// every node (docs/operations.md).
const (
	fenceSuffix   = ":fence"
	releasePrefix = "redlock:released:"
)

// globEscape escapes the characters special to SCAN MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*?[]`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// readMaster reads every key on one master in one MULTI/EXEC, so that the
// figures are one snapshot: GET, PTTL, GET of the fence counter and
// PUBSUB NUMSUB of the release channel. Read-only commands only.
func readMaster(ctx context.Context, m master, keys []string, f inspectFlags) []masterState {
	type reads struct {
		get, fence *redis.StringCmd
		pttl       *redis.Cmd
		subs       *redis.MapStringIntCmd
	}
	rs := make([]reads, len(keys))
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	cmds, err := m.c.TxPipelined(cctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			rs[i] = reads{get: p.Get(cctx, k), pttl: p.Do(cctx, "pttl", k),
				fence: p.Get(cctx, k+fenceSuffix), subs: p.PubSubNumSub(cctx, releasePrefix+k)}
		}
		return nil
	})
	out := make([]masterState, len(keys))
	// The exchange failed (a dial, AUTH, a timeout) unless err is only
	// one command's own reply (redis.Nil, WRONGTYPE): then the others
	// have their answers.
	failed := err != nil && !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() == err })
	for i, k := range keys {
		s := &out[i]
		s.Master = m.name
		if failed {
			s.Error = nodeError(err)
			continue
		}
		r := rs[i]
		token, err := r.get.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			s.Error = nodeError(err) // WRONGTYPE: not a lock key
			continue
		}
		if err == nil {
			s.Held, s.token, s.Token = true, token, tokenShown(token, f.full)
			s.TTLMs, _ = r.pttl.Int64()
		}
		if v, err := r.fence.Result(); err == nil {
			s.Fence, _ = strconv.ParseInt(v, 10, 64)
		}
		s.Waiters = r.subs.Val()[releasePrefix+k]
	}
	return out
}

// decide gives the verdict on one key from its masters' states. elapsed
// is how long the reads took, which the validity does not count on.
func decide(states []masterState, q int, elapsed time.Duration, full bool) verdict {
	var v verdict
	holders := map[string][]int64{} // token → the PTTLs of the masters holding it
	for _, s := range states {
		if s.Error != "" {
			continue
		}
		v.Answered++
		if s.Held {
			holders[s.token] = append(holders[s.token], s.TTLMs)
		}
	}
	var best string
	for t, ttls := range holders {
		if len(ttls) > len(holders[best]) || (len(ttls) == len(holders[best]) && t < best) {
			best = t
		}
	}
	v.Token, v.Holders = tokenShown(best, full), len(holders[best])
	silent := len(states) - v.Answered
	of := fmt.Sprintf("of %s (quorum %d)", nMasters(len(states)), q)
	if silent > 0 {
		of += fmt.Sprintf(", %d did not answer", silent)
	}
	switch {
	case v.Holders >= q:
		v.State, v.ValidMs = stateHeld, validMs(holders[best], q, elapsed)
		v.Why = fmt.Sprintf("held by %s on %d %s; valid for %s", v.Token, v.Holders, of, showMs(v.ValidMs))
	case v.Holders+silent >= q && v.Holders > 0:
		v.State = stateUnknown
		v.Why = fmt.Sprintf("unknown: %s on %d %s", v.Token, v.Holders, of)
	case v.Answered == 0:
		v.State = stateUnknown
		v.Why = fmt.Sprintf("unknown: no master answered (%s, quorum %d)", nMasters(len(states)), q)
	case v.Holders+silent >= q:
		v.State = stateUnknown
		v.Why = fmt.Sprintf("unknown: free on %d %s", v.Answered, of)
	case v.Holders == 0:
		v.State = stateNotHeld
		v.Why = fmt.Sprintf("not held: free on %d %s", v.Answered, of)
	default:
		v.State = stateNotHeld
		v.Why = fmt.Sprintf("not held: %s on %d %s", v.Token, v.Holders, of)
	}
	return v
}

// validMs is the validity left, in milliseconds, of a lock held on the
// masters whose PTTLs are ttls (at least q of them): a quorum holds it
// until the q-th longest expires, less the time the reads took and the
// drift allowance. -1 when that key has no expiry; never below 0.
func validMs(ttls []int64, q int, elapsed time.Duration) int64 {
	sorted := slices.Clone(ttls)
	slices.SortFunc(sorted, func(a, b int64) int { // no expiry (-1) first, then longest first
		if a < 0 || b < 0 {
			return int(min(a, 0) - min(b, 0))
		}
		return int(b - a)
	})
	t := sorted[q-1]
	if t < 0 {
		return -1
	}
	left := time.Duration(t) * time.Millisecond
	left -= elapsed + time.Duration(float64(left)*inspectDriftFactor) + inspectGranularity
	return max(left.Milliseconds(), 0)
}

// showMs formats a TTL or validity in milliseconds.
func showMs(ms int64) string {
	if ms < 0 {
		return "no expiry"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// status is the exit status a report gives (see the usage).
func (rep *inspectReport) status() int {
	if len(rep.Masters)-len(rep.ScanErrors) < rep.Quorum {
		return exitUnavailable
	}
	for _, k := range rep.Keys {
		if k.Verdict.State == stateUnknown {
			return exitUnavailable
		}
	}
	return exitOK
}

// write prints the report: a JSON line, or tables for people.
func (rep *inspectReport) write(w io.Writer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s  %s, quorum %d\n", rep.Time.Format("2006-01-02 15:04:05.000"), nMasters(len(rep.Masters)), rep.Quorum)
	if rep.Prefix != "" {
		fmt.Fprintf(tw, "prefix %q: %d key", rep.Prefix, len(rep.Keys))
		if len(rep.Keys) != 1 {
			fmt.Fprint(tw, "s")
		}
		if rep.Truncated {
			fmt.Fprint(tw, ", more not shown (--limit, or a scan stopped early)")
		}
		fmt.Fprintln(tw)
		for _, e := range rep.ScanErrors {
			fmt.Fprintf(tw, "scan of %s failed: %s\n", e.Master, e.Error)
		}
	}
	for _, k := range rep.Keys {
		fmt.Fprintf(tw, "\n%s\n  MASTER\tHELD\tTOKEN\tTTL\tFENCE\tWAITERS\n", k.Key)
		for _, s := range k.Masters {
			switch {
			case s.Error != "":
				fmt.Fprintf(tw, "  %s\terror\t-\t-\t-\t-\t%s\n", s.Master, s.Error) // every cell, or the columns below lose their alignment
			case s.Held:
				fmt.Fprintf(tw, "  %s\tyes\t%s\t%s\t%s\t%d\n", s.Master, s.Token, showMs(s.TTLMs), showFence(s.Fence), s.Waiters)
			default:
				fmt.Fprintf(tw, "  %s\tno\t-\t-\t%s\t%d\n", s.Master, showFence(s.Fence), s.Waiters)
			}
		}
		fmt.Fprintf(tw, "  verdict: %s\n", k.Verdict.Why)
	}
	return tw.Flush()
}

// nMasters is "1 master" or "n masters".
func nMasters(n int) string {
	if n == 1 {
		return "1 master"
	}
	return strconv.Itoa(n) + " masters"
}

func showFence(f int64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatInt(f, 10)
}
