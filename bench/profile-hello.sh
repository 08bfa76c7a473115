#!/usr/bin/env bash
# Where a served hello's CPU time goes: `faas up` (release) serves functions/hello under
# wrk (1 thread, 8 connections) while `perf record` samples the platform process; the
# samples are grouped by stage (by the function each was taken in) and printed as a
# share of the process's CPU time and as microseconds per request (the process's CPU
# time in the window, from /proc, over the requests wrk counted in it).
#
#   bench/profile-hello.sh                 # 8 s of samples
#   SECONDS_SAMPLED=15 bench/profile-hello.sh
#
# Needs perf (Debian's linux-perf; installed if missing). Sampling is by timer
# (cpu-clock), so it works where the VM exposes no hardware counters; it slows the
# platform by a tenth or so, and the per-request figures include that.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_SAMPLED=${SECONDS_SAMPLED:-8}
PORT=3512

if ! command -v wrk >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq wrk; fi
if ! command -v perf >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq linux-perf; fi

echo "building faas and hello (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello)

source bench/lib.sh
start_faas "$PORT" --deploy functions/hello/workflow.toml
URL=http://127.0.0.1:$PORT/hello

echo "warming up"
wrk -t1 -c8 -d2s "$URL" >/dev/null

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$FAAS_PID/stat"; }
wrk -t1 -c8 -d"$((SECONDS_SAMPLED + 4))s" "$URL" >"$BENCH_DATA/wrk.txt" &
wrk_pid=$!
sleep 2
before=$(cpu_ticks)
perf record -q -F 1999 -p "$FAAS_PID" -o "$BENCH_DATA/perf.data" -- sleep "$SECONDS_SAMPLED" 2>/dev/null
after=$(cpu_ticks)
wait "$wrk_pid"
rps=$(awk '/^Requests\/sec/ { print $2 }' "$BENCH_DATA/wrk.txt")
ticks_per_second=$(getconf CLK_TCK)
cpu_us_per_request=$(awk -v t=$((after - before)) -v hz="$ticks_per_second" -v s="$SECONDS_SAMPLED" -v r="$rps" \
    'BEGIN { printf "%.1f", t / hz / s / r * 1e6 }')

echo
echo "hello under wrk: $rps req/s; the platform's CPU time per request: $cpu_us_per_request us"
echo
printf '%7s %8s  %s\n' "share" "us/req" "stage (by the function a sample was taken in)"
perf report -i "$BENCH_DATA/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
    awk -v per="$cpu_us_per_request" -f bench/perf-stages.awk | sort -rn
