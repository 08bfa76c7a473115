#!/usr/bin/env bash
# Scale-to-zero at rest: deploys 100 workflows of the same component, sends each one
# request, then leaves the platform idle and samples its memory. Prints the resident
# memory of the same process empty, with 100 workflows warm, and after IDLE_SECONDS
# without traffic, plus the live instance count (0 expected). Then deploys DISTINCT more
# workflows, each with a component of its own (the same hello, told apart by a custom
# section, so each is compiled, mapped and linked on its own), and prints what each
# of those added. Each per-workflow figure is also split into anonymous memory (the
# heap: what the workflows hold) and file pages (the compiled components' code, and
# the `faas` binary's own code that deploys and requests run for the first time, a
# cost of the process, not of each workflow, spread over them here).
#
#   bench/idle.sh            # IDLE_SECONDS=30, DISTINCT=20 by default
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-3521}
WORKFLOWS=${WORKFLOWS:-100}
IDLE_SECONDS=${IDLE_SECONDS:-30}
DISTINCT=${DISTINCT:-20}

echo "building (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello)
COMPONENT=$(pwd)/target/wasm32-wasip2/release/hello.wasm

source bench/lib.sh
start_faas "$PORT" --no-demo
DATA=$BENCH_DATA

rss_kib() { awk '/VmRSS/ { print $2 }' "/proc/$FAAS_PID/status"; }
# anon_kib: the resident anonymous memory (RssAnon), the heap's part of VmRSS.
anon_kib() { awk '/RssAnon/ { print $2 }' "/proc/$FAAS_PID/status"; }
instances() { curl -s -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:$PORT/metrics" | awk '/^faas_instances_active / { print $2 }'; }

empty=$(rss_kib) empty_anon=$(anon_kib)
export FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench-admin-token
# Tenants are created explicitly before anything is deployed for them.
for t in $(seq 0 9); do
    "$FAAS_BIN" tenant create "tenant-$t" >/dev/null
done
# deploy_hello NAME COMPONENT TENANT: deploys a workflow NAME serving COMPONENT on /NAME.
deploy_hello() {
    hello_workflow "$1" "$3" "$2" "/$1" >"$DATA/$1.toml"
    "$FAAS_BIN" deploy --no-build "$DATA/$1.toml" >/dev/null
}
for i in $(seq 1 "$WORKFLOWS"); do
    deploy_hello "idle-$i" "$COMPONENT" "tenant-$(( i % 10 ))"
done
deployed=$(rss_kib) deployed_anon=$(anon_kib)
for i in $(seq 1 "$WORKFLOWS"); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/idle-$i"; done
# Scraped before the sample, not inside the idle window: rendering the metrics of 100
# workflows leaves about 0.8 MiB that mimalloc keeps on the scraping thread for its
# purge delay, which would otherwise show as drift.
warm_instances=$(instances)
warm=$(rss_kib) warm_anon=$(anon_kib)

min=$warm max=$warm
for _ in $(seq 1 "$IDLE_SECONDS"); do
    sleep 1
    now=$(rss_kib)
    (( now < min )) && min=$now
    (( now > max )) && max=$now
done
idle=$(rss_kib) idle_anon=$(anon_kib)

# A custom section (id 0, 7 bytes: the name "own" and three digits) at the end of the
# component changes its digest and nothing else.
for i in $(seq 1 "$DISTINCT"); do
    { cat "$COMPONENT"; printf '\x00\x07\x03own%03d' "$i"; } > "$DATA/own-$i.wasm"
    deploy_hello "own-$i" "$DATA/own-$i.wasm" "tenant-$(( i % 10 ))"
done
own=$(rss_kib) own_anon=$(anon_kib)

awk -v empty="$empty" -v deployed="$deployed" -v warm="$warm" -v idle="$idle" -v min="$min" -v max="$max" \
    -v own="$own" -v distinct="$DISTINCT" \
    -v empty_anon="$empty_anon" -v deployed_anon="$deployed_anon" -v warm_anon="$warm_anon" \
    -v idle_anon="$idle_anon" -v own_anon="$own_anon" \
    -v n="$WORKFLOWS" -v secs="$IDLE_SECONDS" -v live="$(instances)" -v live_warm="$warm_instances" 'BEGIN {
    printf "\n%-48s %10s\n", "faas up, resident memory", "MiB"
    printf "%-48s %10.1f\n", "empty (no workflow)", empty / 1024
    printf "%-48s %10.1f\n", n " workflows deployed", deployed / 1024
    printf "%-48s %10.1f\n", "... then each invoked once", warm / 1024
    printf "%-48s %10.1f\n", "after " secs "s idle", idle / 1024
    printf "%-48s %10.1f\n", "range while idle (max - min)", (max - min) / 1024
    printf "\nper deployed workflow: %.1f KiB (%.1f KiB after one request each); idle drift: %+.2f%%; live instances: %s (right after the requests: %s)\n",
        (deployed - empty) / n, (warm - empty) / n, (idle - warm) * 100 / warm, live, live_warm
    printf "  of which anonymous memory: %.1f KiB (%.1f KiB after one request each); file pages: %.1f KiB (%.1f KiB)\n",
        (deployed_anon - empty_anon) / n, (warm_anon - empty_anon) / n,
        (deployed - deployed_anon - empty + empty_anon) / n, (warm - warm_anon - empty + empty_anon) / n
    if (distinct > 0) {
        printf "per deployed workflow with a component of its own: %.1f KiB (%d more workflows)\n", (own - idle) / distinct, distinct
        printf "  of which anonymous memory: %.1f KiB; file pages: %.1f KiB\n",
            (own_anon - idle_anon) / distinct, (own - own_anon - idle + idle_anon) / distinct
    }
}'
