#!/usr/bin/env bash
# Reproduces the tables of BENCHMARKS.md: runs every scenario of the bench
# module COUNT times, then summarises with benchstat (one column per
# contender, medians with confidence intervals) and bench/tables (medians,
# ratios, BENCHMARKS.md's targets MET, MISSED or MISSING). Each round runs every
# scenario once, and each scenario runs every contender one after the other
# on the same redis-server processes, so the contenders are interleaved
# round by round (go test -count k would run each sub-benchmark k times in a
# row, and a burst of noise from other work on the machine would land on one
# contender only). The test binary is built once, so every round runs the
# same code.
#
#   bench/run.sh         # COUNT=5 BENCHTIME=1s PARALLEL=500ms PRIMITIVES=500ms HANDOFF=300x
#   COUNT=3 BENCHTIME=2000x bench/run.sh
#   COUNT=1 BENCHTIME=200x HANDOFF=100x SPLICE=0 bench/run.sh   # a quick check
#
# Each round, with its -benchtime:
#   BENCHTIME   LockUnlock, TryLockHeld, Extend (one goroutine)
#   PARALLEL    LockUnlockParallel, TryLockHeldParallel, ExtendParallel (32)
#   PRIMITIVES  Multi, Readers, Semaphore (the library's primitives against
#               the mutex compositions they replace)
#   HANDOFF     Handoff and HandoffProcs (-bench '^BenchmarkHandoff' matches
#               both): acquisitions per run, since redsync's defaults wait
#               50-250 ms per retry
#
# OUT (default bench/results) receives raw.txt (every benchmark line),
# summary.txt (benchstat), tables.md (bench/tables; also
# spliced into BENCHMARKS.md unless SPLICE=0), the machine's description
# and the run's duration go to machine.txt. Needs redis-server
# on PATH and benchstat (go install golang.org/x/perf/cmd/benchstat@latest).
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-1s}
# The 32-goroutine scenarios and the primitives run half as long as the
# others by default (enough operations at 32 goroutines or with 16 waiters;
# it keeps a default run near 20 minutes); an iteration count is kept as is.
half() {
	case $1 in
	*x) echo "$1" ;;
	*ms) echo "$((${1%ms} / 2))ms" ;;
	*s) awk -v v="${1%s}" 'BEGIN { printf "%dms", v * 500 }' ;;
	*) echo "$1" ;;
	esac
}
PARALLEL=${PARALLEL:-$(half "$BENCHTIME")}
PRIMITIVES=${PRIMITIVES:-$(half "$BENCHTIME")}
HANDOFF=${HANDOFF:-300x}
OUT=${OUT:-results} # where the results go (a trial run can put them elsewhere)
mkdir -p "$OUT"
benchstat=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")
if [ ! -x "$benchstat" ]; then
	echo "run.sh: benchstat not found (go install golang.org/x/perf/cmd/benchstat@latest)" >&2
	exit 1
fi

# Read before machine.txt is rewritten below: the results and the
# BENCHMARKS.md block the benchmark scripts write are not changes to the
# code measured.
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- .. ':!results' ':!../BENCHMARKS.md' 2>/dev/null || commit="$commit (with uncommitted changes)"
{
	echo "date:   $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "commit: $commit"
	echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
	echo "go:     $(go version | cut -d' ' -f3-)"
	echo "redis:  $(redis-server --version | cut -d' ' -f3)"
	echo "peers:  $(go list -m -f '{{.Path}} {{.Version}}' github.com/go-redsync/redsync/v4 github.com/bsm/redislock github.com/redis/go-redis/v9 github.com/redis/rueidis | paste -sd, -)"
	echo "run:    COUNT=$COUNT BENCHTIME=$BENCHTIME PARALLEL=$PARALLEL PRIMITIVES=$PRIMITIVES HANDOFF=$HANDOFF"
} | tee "$OUT/machine.txt"

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go test -c -o "$bin/bench.test" .

# bench runs one group of benchmarks of the test binary, appending to
# raw.txt. A failed sub-benchmark (a contender's error: on an overloaded
# machine a node call can exceed a peer's own timeout) stops its group for
# this round only; the run goes on, the tables show what was measured (a
# target without its figures is MISSING), and run.sh exits 1 at the end.
failed=0
bench() {
	local t0=$SECONDS
	if ! "$bin/bench.test" -test.run '^$' -test.bench "$1" -test.benchtime "$2" -test.count 1 -test.timeout 30m | tee -a "$OUT/raw.txt"; then
		echo "run.sh: round $round: $1 failed; continuing" >&2
		failed=1
	fi
	echo "run.sh: round $round: $1 took $((SECONDS - t0)) s" >&2
}

start=$(date +%s)
: >"$OUT/raw.txt"
for round in $(seq "$COUNT"); do
	echo "round $round of $COUNT" >&2
	bench '^Benchmark(LockUnlock|TryLockHeld|Extend)$' "$BENCHTIME"
	bench '^Benchmark(LockUnlockParallel|TryLockHeldParallel|ExtendParallel)$' "$PARALLEL"
	bench '^Benchmark(Multi|Readers|Semaphore)$' "$PRIMITIVES"
	bench '^BenchmarkHandoff' "$HANDOFF"
done
echo "took:   $(($(date +%s) - start)) s for $COUNT round(s)" | tee -a "$OUT/machine.txt"

"$benchstat" -col /impl "$OUT/raw.txt" >"$OUT/summary.txt"
go run ./tables "$OUT/raw.txt" >"$OUT/tables.md"
go run ./tables -summary "$OUT/raw.txt" | tee "$OUT/summary.md"

# Replace the generated block of BENCHMARKS.md with the new tables, unless
# something failed.
if [ "${SPLICE:-1}" = 1 ] && [ "$failed" = 0 ]; then
	doc=../BENCHMARKS.md
	awk -v tables="$OUT/summary.md" '
		/^<!-- begin: bench\/results\/summary.md/ { print; while ((getline l < tables) > 0) print l; skip = 1; next }
		/^<!-- end: bench\/results\/summary.md/ { skip = 0 }
		!skip { print }
	' "$doc" >"$doc.new" && mv "$doc.new" "$doc"
	echo "updated $doc; edit its prose (machine, targets' limits) by hand" >&2
fi
if [ "$failed" = 1 ]; then
	echo "run.sh: some benchmarks failed (see FAIL in $OUT/raw.txt); $OUT/tables.md has the rest, BENCHMARKS.md was left alone" >&2
	exit 1
fi
