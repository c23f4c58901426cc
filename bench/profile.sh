#!/usr/bin/env bash
# Profiles Lock+Unlock at N=5 in the root package (BenchmarkLockUnlock in
# bench_test.go, real redis-server processes) and prints where the CPU time
# and the allocations go: the inputs of BENCHMARKS.md, "Hot path".
#
#   bench/profile.sh            # profiles in bench/results/prof/
#   BENCH='BenchmarkLockUnlockParallel/N=5' bench/profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=${BENCH:-'BenchmarkLockUnlock$/N=5'}
out=bench/results/prof
mkdir -p "$out"
go test -run '^$' -bench "$BENCH" -benchtime 4000x -count 1 -cpuprofile "$out/cpu.out" -o "$out/redlock.test" .
# Every allocation sampled (memprofilerate 1): exact counts by site, slower run.
go test -run '^$' -bench "$BENCH" -benchtime 3000x -count 1 -memprofile "$out/mem.out" -memprofilerate 1 -o "$out/redlock.test" .
go tool pprof -top -cum -nodecount 40 "$out/redlock.test" "$out/cpu.out" >"$out/cpu.txt"
go tool pprof -sample_index=alloc_objects -top -nodecount 30 "$out/redlock.test" "$out/mem.out" >"$out/allocs.txt"
cat "$out/cpu.txt" "$out/allocs.txt"
