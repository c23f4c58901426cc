#!/usr/bin/env bash
# Reproduces the tables of BENCHMARKS.md: runs every scenario of the bench
# module COUNT times, then summarises with benchstat (one column per
# contender, medians with confidence intervals) and bench/tables (medians,
# ratios, targets). Each round is one go test -count 1 that runs every
# contender one after the other on the same redis-server processes, so the
# contenders are interleaved round by round (go test -count k would run each
# sub-benchmark k times in a row, and a burst of noise from other work on the
# machine would land on one contender only).
#
#   bench/run.sh                   # COUNT=6, BENCHTIME=1s, HANDOFF=300x
#   COUNT=3 BENCHTIME=2000x bench/run.sh
#
# Raw output goes to bench/results/raw.txt, the summary to
# bench/results/summary.txt, the tables to bench/results/tables.md (also
# spliced into BENCHMARKS.md unless SPLICE=0), the machine's description
# to bench/results/machine.txt. Needs redis-server on PATH and benchstat
# (go install golang.org/x/perf/cmd/benchstat@latest).
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-1s}
HANDOFF=${HANDOFF:-300x} # acquisitions per hand-off run: redsync's defaults wait 50-250 ms per retry
mkdir -p results
benchstat=$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")

{
	echo "date:   $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- .. 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores"
	echo "go:     $(go version | cut -d' ' -f3-)"
	echo "redis:  $(redis-server --version | cut -d' ' -f3)"
	echo "peers:  $(go list -m -f '{{.Path}} {{.Version}}' github.com/go-redsync/redsync/v4 github.com/bsm/redislock github.com/redis/go-redis/v9 | paste -sd, -)"
	echo "run:    COUNT=$COUNT BENCHTIME=$BENCHTIME HANDOFF=$HANDOFF"
} | tee results/machine.txt

: >results/raw.txt
for round in $(seq "$COUNT"); do
	echo "round $round of $COUNT" >&2
	go test -run '^$' -bench 'LockUnlock|TryLockHeld|Extend' -benchtime "$BENCHTIME" -count 1 -timeout 30m . | tee -a results/raw.txt
	go test -run '^$' -bench 'Handoff' -benchtime "$HANDOFF" -count 1 -timeout 30m . | tee -a results/raw.txt
done

"$benchstat" -col /impl results/raw.txt >results/summary.txt
go run ./tables results/raw.txt | tee results/tables.md

# Replace the generated block of BENCHMARKS.md with the new tables.
if [ "${SPLICE:-1}" = 1 ]; then
	doc=../BENCHMARKS.md
	awk -v tables=results/tables.md '
		/^<!-- begin: bench\/results\/tables.md/ { print; while ((getline l < tables) > 0) print l; skip = 1; next }
		/^<!-- end: bench\/results\/tables.md/ { skip = 0 }
		!skip { print }
	' "$doc" >"$doc.new" && mv "$doc.new" "$doc"
	echo "updated $doc; edit its prose (machine, targets' limits) by hand" >&2
fi
