#!/usr/bin/env bash
# Interleaved A/B of one group of benchmarks: how BENCHMARKS.md judges a
# change. Build the bench test binary of each tree first (in a worktree
# of the tree before the change, its bench module builds that tree's
# library, since it replaces the root module with ../):
#
#   git worktree add /tmp/before HEAD~1
#   (cd /tmp/before/bench && go test -c -o /tmp/bench.before .)
#   (cd bench && go test -c -o /tmp/bench.after .)
#   ROUNDS=6 BENCHTIME=2000x BENCH='^BenchmarkHandoffProcs$/N=5/impl=redlock$' \
#     bench/ab.sh before /tmp/bench.before after /tmp/bench.after
#
# (-test.bench matches each level of a name on its own and unanchored:
# 'BenchmarkHandoff/...' also runs BenchmarkHandoffProcs; anchor a level
# with ^ and $ to run it alone.)
#
# Each of ROUNDS rounds (default 6) runs every binary once, in the order
# given, with -test.bench BENCH and -test.benchtime BENCHTIME (default
# 2000x); NAME's benchmark lines go to OUT/ab-NAME.txt (OUT: default a
# new temporary directory), emptied first. Then, per NAME, bench/tables prints the
# medians and ratios of those rounds (its hand-off tables have acq/s ÷
# limit; the targets it prints are judged on that NAME's rounds alone).
# Set REDLOCK_BENCH_ADDRS so that every binary runs on the same
# redis-servers; without it each run starts servers of its own.
set -euo pipefail
cd "$(dirname "$0")"
ROUNDS=${ROUNDS:-6}
BENCHTIME=${BENCHTIME:-2000x}
OUT=${OUT:-$(mktemp -d)}
: "${BENCH:?set BENCH to the -test.bench pattern}"
if [ $# -lt 2 ] || [ $(($# % 2)) -ne 0 ]; then
	echo "usage: [ROUNDS=n] [BENCHTIME=t] BENCH=pattern bench/ab.sh NAME BINARY [NAME BINARY ...]" >&2
	exit 2
fi
names=() bins=()
while [ $# -gt 0 ]; do
	names+=("$1") bins+=("$2")
	shift 2
done
mkdir -p "$OUT"
for name in "${names[@]}"; do
	: >"$OUT/ab-$name.txt"
done
failed=0
for round in $(seq "$ROUNDS"); do
	echo "round $round of $ROUNDS" >&2
	for i in "${!names[@]}"; do
		if ! "${bins[$i]}" -test.run '^$' -test.bench "$BENCH" -test.benchtime "$BENCHTIME" -test.count 1 -test.timeout 30m >"$OUT/last.txt"; then
			cp "$OUT/last.txt" "$OUT/failed-${names[$i]}-$round.txt"
			echo "ab.sh: round $round: ${names[$i]} failed (its output: $OUT/failed-${names[$i]}-$round.txt)" >&2
			failed=1
		fi
		grep '^Benchmark' "$OUT/last.txt" >>"$OUT/ab-${names[$i]}.txt" || true
	done
done
for name in "${names[@]}"; do
	echo "== $name ($OUT/ab-$name.txt)"
	go run ./tables "$OUT/ab-$name.txt"
done
exit "$failed"
