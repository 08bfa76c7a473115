#!/usr/bin/env bash
# One tenant's routes against another tenant's hello: `wasi-hello.wasm` (tenant `demo`,
# /wasi-hello) at 8 connections, with no other route deployed, then again after tenant
# `many` deployed its whole workflow quota (WORKFLOWS, 100 by default) of 128 routes
# each, the most a workflow may have: 12,800 exact routes, each longer than the
# hello's. Prints the hello's throughput and p99 both ways and their ratio: what
# another tenant's routes cost each request (finding its route in the gateway's table,
# `faas_workflow::RouteTable`), round by round; each round deploys and removes the
# routes again.
#
#   bench/route-table.sh                   # 10 s per measurement, 3 rounds
#   DURATION=20s ROUNDS=5 bench/route-table.sh
#   FAAS_BIN=/tmp/faas-old bench/route-table.sh   # another build of faas (bench/lib.sh)
#
# Installs wrk (apt) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-8}
WORKFLOWS=${WORKFLOWS:-100}
ROUTES=128
PORT=3514

if ! command -v wrk >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq wrk; fi

echo "building faas and the functions (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p wasi-hello -p hello)
source bench/lib.sh
start_faas "$PORT" --deploy functions/wasi-hello/workflow.toml
URL=http://127.0.0.1:$PORT
export FAAS_URL=$URL FAAS_TOKEN=bench-admin-token
"$FAAS_BIN" tenant create many >/dev/null

# Tenant `many`'s manifests: workflow w of ROUTES routes to the SDK hello.
HELLO=$PWD/target/wasm32-wasip2/release/hello.wasm
for w in $(seq 1 "$WORKFLOWS"); do
    routes_workflow "many-$w" many "$HELLO" "/a-route-longer-than-the-hellos/$w" "$ROUTES" \
        >"$BENCH_DATA/many-$w.toml"
done
deploy_many() {
    for w in $(seq 1 "$WORKFLOWS"); do "$FAAS_BIN" deploy --no-build "$BENCH_DATA/many-$w.toml" >/dev/null; done
    # One of them answers: the routes are live.
    curl -sf "$URL/a-route-longer-than-the-hellos/$WORKFLOWS/$ROUTES?name=x" >/dev/null
}
remove_many() {
    for w in $(seq 1 "$WORKFLOWS"); do "$FAAS_BIN" rm "many-$w" >/dev/null; done
}

# Prints "req/s p50_ms p99_ms" of the hello for one wrk run (bench/lib.sh).
measure() { wrk_measure 1 "$CONNECTIONS" "$DURATION" "$URL/wasi-hello"; }

echo "warming up"
wrk -t1 -c2 -d2s "$URL/wasi-hello" >/dev/null

printf '\n%-6s %-34s %10s %9s\n' "round" "tenant demo's /wasi-hello" "req/s" "p99 ms"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    read -r alone_rps _ alone_p99 < <(measure)
    printf '%-6s %-34s %10s %9s\n' "$round" "no other route" "$alone_rps" "$alone_p99"
    deploy_many
    read -r many_rps _ many_p99 < <(measure)
    printf '%-6s %-34s %10s %9s\n' "$round" "$((WORKFLOWS * ROUTES)) routes of tenant many" "$many_rps" "$many_p99"
    remove_many
    ratios+=("$(ratio "$many_rps" "$alone_rps")")
done
echo
echo "req/s with the other tenant's routes / without, per round: ${ratios[*]}"
