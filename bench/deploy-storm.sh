#!/usr/bin/env bash
# A deploy storm: tenant B's hello (`demo`, /hello) at 8 connections, alone, then again
# while tenant A (`storm`) redeploys the 18 MiB Python hello (componentize-py) over and
# over, one custom section changed each time so that every deploy compiles. Prints B's
# throughput and p99 both ways and their ratio, and how long A's deploys took alone and
# during the storm: the price of keeping compiles below serving (worker
# `compile_threads.rs`).
#
#   bench/deploy-storm.sh                 # 10 s per measurement, 3 rounds
#   DURATION=20s ROUNDS=5 bench/deploy-storm.sh
#   FAAS_BIN=/tmp/faas-old bench/deploy-storm.sh   # another build of faas (bench/lib.sh)
#
# Installs wrk (apt) and the language toolchains (testing/languages/install) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-8}
PORT=3513

if ! command -v wrk >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq wrk; fi
PATH="$(testing/languages/install):$PATH"

echo "building faas, the hello and the Python hello (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello)
source bench/lib.sh
PYTHON_HELLO=$(build_python_hello)

hello_workflow storm storm "$BENCH_DATA/storm.wasm" /storm >"$BENCH_DATA/storm.toml"
deploys=0
# Writes A's component anew: the Python hello with a custom section at its end (id 0,
# 10 bytes: name `n`, an 8-digit count) that no deploy had before.
next_component() {
    deploys=$((deploys + 1))
    cp "$PYTHON_HELLO" "$BENCH_DATA/storm.wasm"
    printf '\x00\x0a\x01n%08d' "$deploys" >>"$BENCH_DATA/storm.wasm"
}
# One deploy of A's, of a new component; appends its duration in seconds to
# $BENCH_DATA/durations.
redeploy() {
    next_component
    local start
    start=$(date +%s.%N)
    FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench-admin-token "$FAAS_BIN" deploy --no-build \
        "$BENCH_DATA/storm.toml" >/dev/null
    echo "$(since "$start" 1)" >>"$BENCH_DATA/durations"
}
# Deploys until $BENCH_DATA/stop exists.
storm() { while [ ! -e "$BENCH_DATA/stop" ]; do redeploy; done; }
# The mean of the durations file, and how many it holds.
durations() { awk '{ sum += $1; n++ } END { printf "%.1f s (%d deploys)", sum / n, n }' "$BENCH_DATA/durations"; }

next_component
start_faas "$PORT" --deploy functions/hello/workflow.toml --deploy "$BENCH_DATA/storm.toml"
URL=http://127.0.0.1:$PORT
: >"$BENCH_DATA/durations"
redeploy
redeploy
alone_deploys=$(durations)

# Prints "req/s p50_ms p99_ms" of tenant B's hello for one wrk run (bench/lib.sh).
measure() { wrk_measure 1 "$CONNECTIONS" "$DURATION" "$URL/hello"; }

echo "warming up"
wrk -t1 -c2 -d2s "$URL/hello" >/dev/null

printf '\n%-6s %-28s %10s %9s\n' "round" "tenant B's /hello" "req/s" "p99 ms"
ratios=()
: >"$BENCH_DATA/durations"
for round in $(seq 1 "$ROUNDS"); do
    read -r alone_rps _ alone_p99 < <(measure)
    rm -f "$BENCH_DATA/stop"
    storm &
    storm_pid=$!
    sleep 1
    read -r stormed_rps _ stormed_p99 < <(measure)
    touch "$BENCH_DATA/stop"
    wait "$storm_pid"
    printf '%-6s %-28s %10s %9s\n' "$round" "alone" "$alone_rps" "$alone_p99"
    printf '%-6s %-28s %10s %9s\n' "$round" "while A redeploys" "$stormed_rps" "$stormed_p99"
    ratios+=("$(ratio "$stormed_rps" "$alone_rps")")
done
echo
echo "B's throughput during the storm / alone, per round: ${ratios[*]}"
echo "A's deploys of the Python hello: $alone_deploys on their own; $(durations) during the storm"
