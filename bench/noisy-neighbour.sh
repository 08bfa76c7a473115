#!/usr/bin/env bash
# Fair CPU between tenants: tenant B's hello (`demo`, /hello) at 8 connections, alone,
# then again while tenant A (`chaos`) keeps 16 busy loops running (/misbehave/loop,
# each interrupted at its 1 s deadline and sent again at once). Prints both, and B's
# throughput under attack as a share of its throughput alone.
#
#   bench/noisy-neighbour.sh                 # 10 s per measurement, 3 rounds
#   DURATION=20s ROUNDS=5 bench/noisy-neighbour.sh
#
# Installs wrk (apt) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-8}
ATTACKERS=${ATTACKERS:-16}
PORT=3511

if ! command -v wrk >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq wrk; fi

echo "building faas and the functions (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello -p misbehave)

source bench/lib.sh
start_faas "$PORT" --deploy functions/hello/workflow.toml \
    --deploy functions/misbehave/workflow.toml
URL=http://127.0.0.1:$PORT

# Prints "req/s p50_ms p99_ms" of tenant B's hello for one wrk run (bench/lib.sh).
measure() { wrk_measure 1 "$CONNECTIONS" "$DURATION" "$URL/hello"; }

echo "warming up"
wrk -t1 -c2 -d2s "$URL/hello" >/dev/null

printf '\n%-6s %-28s %10s %9s\n' "round" "tenant B's /hello" "req/s" "p99 ms"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    read -r alone_rps _ alone_p99 < <(measure)
    # The attack runs a little longer than the measurement, which starts once the
    # loops are running.
    wrk -t1 -c"$ATTACKERS" -d"$(( ${DURATION%s} + 3 ))s" --timeout 5s "$URL/misbehave/loop" >/dev/null 2>&1 &
    attack=$!
    sleep 1.5
    read -r attacked_rps _ attacked_p99 < <(measure)
    wait "$attack" || true
    printf '%-6s %-28s %10s %9s\n' "$round" "alone" "$alone_rps" "$alone_p99"
    printf '%-6s %-28s %10s %9s\n' "$round" "with $ATTACKERS busy loops of A" "$attacked_rps" "$attacked_p99"
    ratios+=("$(ratio "$attacked_rps" "$alone_rps")")
done
echo
echo "B's throughput under attack / alone, per round: ${ratios[*]} (goal: at least 0.5, p99 under 10 ms)"
