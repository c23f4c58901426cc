#!/usr/bin/env bash
# The one-goroutine scenarios at one node (Lock+Unlock, TryLockHeld,
# Extend) with the client and the redis-server pinned to CPUs: on the
# same CPU, and on different ones.
#
# At one node a Lock+Unlock is two round trips (the others one), and on a virtual machine
# whose idle CPUs sleep, a round trip between processes on two CPUs costs
# a wake-up of each (tens of µs) where on one CPU it costs a context
# switch. Unpinned, the kernel moves the client's threads and the server
# between the CPUs as it likes, and a contender's rate in one round of
# bench/run.sh depends on where they happened to run more than on its own
# code (BENCHMARKS.md, "Where the one-node figures come from"). Pinned,
# each layout is steady: on one CPU the contenders' own costs decide, on
# two the wake-ups do, the same for all.
#
#   bench/placement.sh                      # ROUNDS=5 BENCHTIME=2000x
#   ROUNDS=3 BENCHTIME=1s bench/placement.sh
#
# One redis-server on SERVER_CPU (default 1); the benchmark binary (built
# once) runs on SERVER_CPU ("same") and on CLIENT_CPU (default 0,
# "cross"), the layouts alternating round by round. Writes
# OUT/placement.txt (every benchmark line, prefixed with its layout) and
# OUT/placement.md: per layout and scenario, each contender's median
# ns/op and this library's rate over it. Needs redis-server and taskset
# on PATH and two CPUs.
set -euo pipefail
cd "$(dirname "$0")"

ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-2000x}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
OUT=${OUT:-results}
IMPLS=${IMPLS:-redlock|redislock|raw|redsync}
SCENARIOS=${SCENARIOS:-LockUnlock|TryLockHeld|Extend}
for tool in redis-server taskset; do
	command -v "$tool" >/dev/null || { echo "placement.sh: $tool not found" >&2; exit 1; }
done
if [ "$(nproc)" -lt 2 ]; then
	echo "placement.sh: needs two CPUs" >&2
	exit 1
fi
mkdir -p "$OUT"

dir=$(mktemp -d)
port=${PORT:-$((20000 + RANDOM % 10000))}
taskset -c "$SERVER_CPU" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$dir" --logfile "$dir/redis.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
if ! kill -0 "$server" 2>/dev/null; then
	echo "placement.sh: redis-server did not start on port $port (PORT= to choose another)" >&2
	exit 1
fi
go test -c -o "$dir/bench.test" .

: >"$OUT/placement.txt"
for round in $(seq "$ROUNDS"); do
	for layout in same cross; do
		cpu=$SERVER_CPU
		[ "$layout" = cross ] && cpu=$CLIENT_CPU
		REDLOCK_BENCH_ADDRS=127.0.0.1:$port taskset -c "$cpu" "$dir/bench.test" -test.run '^$' \
			-test.bench "^Benchmark($SCENARIOS)\$/^N=1\$/^impl=($IMPLS)\$" -test.benchtime "$BENCHTIME" -test.count 1 |
			awk -v l="$layout" '/^Benchmark/ { print l, $0 }' >>"$OUT/placement.txt"
	done
	echo "placement.sh: round $round of $ROUNDS" >&2
done

# Medians of ns/op per layout, scenario and contender, and redlock's
# ops/s over each.
awk '
	{
		sub(/-[0-9]+$/, "", $2); split($2, p, "/N=1/impl="); sub(/^Benchmark/, "", p[1])
		k = $1 " " p[1] " " p[2]; v[k, ++n[k]] = $4; groups[$1 " " p[1]]; impls[p[2]]
	}
	function median(k,   i, j, t, m) {
		m = n[k]
		for (i = 1; i <= m; i++) a[i] = v[k, i]
		for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
	}
	END {
		for (g in groups) {
			r = median(g " redlock")
			for (i in impls) if ((g " " i) in n) {
				m = median(g " " i)
				split(g, gs, " ")
				printf "| %s | %s | %s | %.1f | %.2f | %d |\n", gs[1], gs[2], i, m / 1000, m / r, n[g " " i]
			}
		}
	}
' "$OUT/placement.txt" | sort -t'|' -k2,2r -k3,3 -k4,4 >"$dir/rows"
{
	echo "| layout | scenario | contender | median µs/op | redlock ÷ it (ops/s) | rounds |"
	echo "|---|---|---|---:|---:|---:|"
	cat "$dir/rows"
} | tee "$OUT/placement.md"
