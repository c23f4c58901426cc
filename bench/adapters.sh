#!/usr/bin/env bash
# Measures the library's adapters side by side, go-redis (contender
# "redlock") and rueidis with its defaults ("redlock-rueidis") and with
# MaxFlushDelay ("redlock-rueidis-flushdelay"): Lock+Unlock at N = 1 and 5,
# one goroutine and 32, in COUNT interleaved rounds (each round is one
# go test -count 1 that runs the adapters one after the other on the same
# redis-server processes), then the table of BENCHMARKS.md, "Which
# adapter": medians, and each rueidis configuration's ops/s over go-redis's
# per round, with its median and range. About 25 s per round.
# bench/run.sh measures them too, with everything else.
#
#   bench/adapters.sh              # COUNT=8 BENCHTIME=1s
#
# Writes bench/results/adapters-raw.txt and bench/results/adapters.md.
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-8}
BENCHTIME=${BENCHTIME:-1s}
mkdir -p results
{
	echo "date:   $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- .. 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "go:     $(go version | cut -d' ' -f3-)"
	echo "redis:  $(redis-server --version | cut -d' ' -f3)"
	echo "libs:   $(go list -m -f '{{.Path}} {{.Version}}' github.com/redis/go-redis/v9 github.com/redis/rueidis | paste -sd, -)"
	echo "run:    COUNT=$COUNT BENCHTIME=$BENCHTIME"
} >results/adapters-machine.txt
cat results/adapters-machine.txt

: >results/adapters-raw.txt
for round in $(seq "$COUNT"); do
	echo "round $round of $COUNT" >&2
	go test -run '^$' -bench 'LockUnlock(Parallel)?$/^N=(1|5)$/^impl=redlock(-rueidis(-flushdelay)?)?$' \
		-benchtime "$BENCHTIME" -count 1 -timeout 10m . | tee -a results/adapters-raw.txt
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a results/adapters-machine.txt
go run ./tables -adapters results/adapters-raw.txt | tee results/adapters.md
