#!/usr/bin/env bash
# What tenants' routes cost the control plane, when tenants hold their whole workflow
# quota (100 workflows) of 128-route workflows, the most a workflow may have:
#
# 1. In one process (bench/src/bin/route-owners.rs), for 1, 2 and 4 such tenants: one
#    more 128-route deploy, and a restart's restore of every workflow in turn, with the
#    gateway's index of route owners and its route table changed by one workflow's
#    routes, against the peer in the same run: every new route checked against every
#    deployed one (`faas_workflow::conflicts_by_scan`) and the table rebuilt whole, as
#    the gateway did before.
# 2. On the platform (`faas up`): TENANTS_UP such tenants (2 by default) deployed with
#    `faas deploy`, then the platform restarted RESTARTS times (3), each timed until
#    the last restored workflow's last route answers. PEER_BIN names another build of
#    faas (say, one from before the index) to measure the same way after it.
#
#   bench/route-owners.sh
#   ROUTE_OWNERS_TENANTS=1,2,4,8 bench/route-owners.sh   # the peer's restart grows with the square
#   PEER_BIN=/tmp/faas-before bench/route-owners.sh
set -euo pipefail
cd "$(dirname "$0")/.."

TENANTS_UP=${TENANTS_UP:-2}
RESTARTS=${RESTARTS:-3}
WORKFLOWS=100
ROUTES=128
PORT=3516

echo "building the driver, faas and the SDK hello (release)"
cargo build --release -q -p faas-bench --bin route-owners
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello)
source bench/lib.sh

echo
echo "in one process"
target/release/route-owners

HELLO=$PWD/target/wasm32-wasip2/release/hello.wasm
for t in $(seq 1 "$TENANTS_UP"); do
    for w in $(seq 1 "$WORKFLOWS"); do
        routes_workflow "t$t-w$w" "t$t" "$HELLO" "/t$t/w$w" "$ROUTES" >"$BENCH_DATA/t$t-w$w.toml"
    done
done
LAST_ROUTE=/t$TENANTS_UP/w$WORKFLOWS/$ROUTES

# platform BIN PORT: deploys the tenants' workflows with BIN's platform on PORT, then
# restarts it RESTARTS times; prints the times.
platform() {
    FAAS_BIN=$1
    local port=$2 url=http://127.0.0.1:$2
    start_faas "$port"
    export FAAS_URL=$url FAAS_TOKEN=bench-admin-token
    local started
    started=$(date +%s.%N)
    for t in $(seq 1 "$TENANTS_UP"); do
        "$FAAS_BIN" tenant create "t$t" >/dev/null
        for w in $(seq 1 "$WORKFLOWS"); do
            "$FAAS_BIN" deploy --no-build "$BENCH_DATA/t$t-w$w.toml" >/dev/null
        done
    done
    local deploys restarts=()
    deploys=$(since "$started")
    for _ in $(seq 1 "$RESTARTS"); do
        kill "$FAAS_PID"
        wait "$FAAS_PID" 2>/dev/null || true
        started=$(date +%s.%N)
        launch_faas "$port"
        until curl -sf -o /dev/null "$url$LAST_ROUTE?name=x"; do sleep 0.02; done
        restarts+=("$(since "$started")")
    done
    kill "$FAAS_PID"
    printf '%-28s %12s s %s s\n' "$1" "$deploys" "${restarts[*]}"
}

echo
echo "the platform: $TENANTS_UP tenants' $((TENANTS_UP * WORKFLOWS)) workflows of $ROUTES routes"
printf '%-28s %14s %s\n' "build" "deploying all" "restarts until the last route answers"
platform "$FAAS_BIN" "$PORT"
if [ -n "${PEER_BIN:-}" ]; then platform "$PEER_BIN" $((PORT + 1)); fi
