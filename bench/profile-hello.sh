#!/usr/bin/env bash
# Where a served hello's CPU time goes: `faas up` (release) serves functions/hello under
# wrk (1 thread, 8 connections) while `perf record` samples the platform process; the
# samples are grouped by stage (by the function each was taken in) and printed as a
# share of the process's CPU time and as microseconds per request (the process's CPU
# time in the window, from /proc, over the requests wrk counted in it). Then, without
# sampling, it counts per request what `perf stat` sees of the platform (CPU time,
# thread switches, system calls) and of a native hyper hello world under the same wrk,
# the floor of what serving a request over loopback costs in switches and calls.
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
cargo build --release -q -p faas-gateway --example native_hello
(cd functions && cargo build --release -q -p hello)

source bench/lib.sh
start_faas "$PORT" --deploy functions/hello/workflow.toml
URL=http://127.0.0.1:$PORT/hello
target/release/examples/native_hello 127.0.0.1:$((PORT + 1)) >/dev/null &
NATIVE_PID=$!
bench_pids+=("$NATIVE_PID")
wait_up "http://127.0.0.1:$((PORT + 1))/"

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

# System calls are counted at a tracepoint, which needs tracefs (root, or a lowered
# perf_event_paranoid); without it that column says n/a.
SYSCALLS=raw_syscalls:sys_enter
perf stat -e "$SYSCALLS" -- true >/dev/null 2>&1 || SYSCALLS=""

# counted NAME PID URL: one line of per-request counts for PID while wrk loads URL.
counted() {
    wrk -t1 -c8 -d"$((SECONDS_SAMPLED + 3))s" "$3" >"$BENCH_DATA/wrk-counted.txt" &
    local wrk_pid=$!
    sleep 1
    perf stat -x, -e "task-clock,context-switches${SYSCALLS:+,$SYSCALLS}" -p "$2" \
        -o "$BENCH_DATA/stat.txt" -- sleep "$SECONDS_SAMPLED"
    wait "$wrk_pid"
    local rps
    rps=$(awk '/^Requests\/sec/ { print $2 }' "$BENCH_DATA/wrk-counted.txt")
    awk -F, -v name="$1" -v r="$rps" -v s="$SECONDS_SAMPLED" '
        $3 == "task-clock" { cpu = $1 } $3 == "context-switches" { cs = $1 }
        $3 == "raw_syscalls:sys_enter" { calls = $1 }
        END {
            n = r * s
            per_call = calls == "" ? "n/a" : sprintf("%.2f", calls / n)
            printf "%-22s %9.0f %8.1f %9.2f %13s\n", name, r, cpu * 1000 / n, cs / n, per_call
        }
    ' "$BENCH_DATA/stat.txt"
}

echo
echo "counted without sampling (perf stat), per request, wrk -t1 -c8:"
printf '%-22s %9s %8s %9s %13s\n' "server" "req/s" "CPU us" "switches" "system calls"
wrk -t1 -c2 -d2s "http://127.0.0.1:$((PORT + 1))/" >/dev/null
counted "faas, hello" "$FAAS_PID" "$URL"
counted "native hyper" "$NATIVE_PID" "http://127.0.0.1:$((PORT + 1))/"
