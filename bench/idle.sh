#!/usr/bin/env bash
# Scale-to-zero at rest: deploys 100 workflows, sends each one request, then leaves the
# platform idle and samples its memory. Prints the resident memory of the same process
# empty, with 100 workflows warm, and after IDLE_SECONDS without traffic, plus the live
# instance count (0 expected).
#
#   bench/idle.sh            # IDLE_SECONDS=30 by default
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-3521}
WORKFLOWS=${WORKFLOWS:-100}
IDLE_SECONDS=${IDLE_SECONDS:-30}

echo "building (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello)
COMPONENT=$(pwd)/target/wasm32-wasip2/release/hello.wasm

source bench/lib.sh
start_faas "$PORT" --no-demo
DATA=$BENCH_DATA

rss_kib() { awk '/VmRSS/ { print $2 }' "/proc/$FAAS_PID/status"; }
instances() { curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^faas_instances_active / { print $2 }'; }

empty=$(rss_kib)
export FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench
# Tenants are created explicitly before anything is deployed for them.
for t in $(seq 0 9); do
    "$FAAS_BIN" tenant create "tenant-$t" >/dev/null
done
for i in $(seq 1 "$WORKFLOWS"); do
    cat > "$DATA/idle-$i.toml" <<TOML
name = "idle-$i"
tenant = "tenant-$(( i % 10 ))"

[functions.hello]
component = "$COMPONENT"

[[triggers.http]]
route = "/idle-$i"
function = "hello"
TOML
    "$FAAS_BIN" deploy --no-build "$DATA/idle-$i.toml" >/dev/null
done
deployed=$(rss_kib)
for i in $(seq 1 "$WORKFLOWS"); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/idle-$i"; done
warm=$(rss_kib)
warm_instances=$(instances)

min=$warm max=$warm
for _ in $(seq 1 "$IDLE_SECONDS"); do
    sleep 1
    now=$(rss_kib)
    (( now < min )) && min=$now
    (( now > max )) && max=$now
done
idle=$(rss_kib)

awk -v empty="$empty" -v deployed="$deployed" -v warm="$warm" -v idle="$idle" -v min="$min" -v max="$max" \
    -v n="$WORKFLOWS" -v secs="$IDLE_SECONDS" -v live="$(instances)" -v live_warm="$warm_instances" 'BEGIN {
    printf "\n%-48s %10s\n", "faas up, resident memory", "MiB"
    printf "%-48s %10.1f\n", "empty (no workflow)", empty / 1024
    printf "%-48s %10.1f\n", n " workflows deployed", deployed / 1024
    printf "%-48s %10.1f\n", "... then each invoked once", warm / 1024
    printf "%-48s %10.1f\n", "after " secs "s idle", idle / 1024
    printf "%-48s %10.1f\n", "range while idle (max - min)", (max - min) / 1024
    printf "\nper deployed workflow: %.1f KiB (%.1f KiB after one request each); idle drift: %+.2f%%; live instances: %s (right after the requests: %s)\n",
        (deployed - empty) / n, (warm - empty) / n, (idle - warm) * 100 / warm, live, live_warm
}'
