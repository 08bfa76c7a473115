#!/usr/bin/env bash
# Regions across worker processes (services mode): the regions fan-out example on two
# replicas with `spread_branches`, in two clusters started here against one Redis:
# one whose workers share a host id (the blob passes as a memory file descriptor) and
# one whose workers claim different hosts (the blob goes over HTTP/2). Prints the
# handoff and end-to-end medians of the local, descriptor and network branches.
#
#   bench/regions-spread.sh
#   REGIONS_SPREAD_MIB=1,100 bench/regions-spread.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REDIS_PORT=${REDIS_PORT:-3551}
PORT_FD=${PORT_FD:-3552}
PORT_NET=${PORT_NET:-3553}

echo "building (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-bench --bin regions-spread
(cd functions && cargo build --release -q -p region-transfer)

source bench/lib.sh
start_redis "$REDIS_PORT"

# start_cluster NAME DB GATEWAY_PORT HOST_ID_A HOST_ID_B: a scheduler, a gateway and
# two workers sharing Redis database DB.
start_cluster() {
    local name=$1 redis="redis://127.0.0.1:$REDIS_PORT/$2" port=$3
    local common=(--redis "$redis" --sync-interval-ms 50)
    FAAS_LOG=warn "$FAAS_BIN" scheduler "${common[@]}" \
        >"$BENCH_DATA/$name-scheduler.log" 2>&1 &
    bench_pids+=($!)
    FAAS_LOG=warn "$FAAS_BIN" gateway "${common[@]}" --listen "127.0.0.1:$port" \
        --token bench-admin-token --internal-token bench-internal-token --data-dir "$BENCH_DATA/$name-gateway" \
        --max-body-bytes 1000000000 >"$BENCH_DATA/$name-gateway.log" 2>&1 &
    bench_pids+=($!)
    for worker in a b; do
        local host=$4
        [ "$worker" = b ] && host=$5
        FAAS_LOG=warn "$FAAS_BIN" worker "${common[@]}" --internal-token bench-internal-token \
            --id "$name-$worker" --host-id "$host" --max-memory-mb 1100 \
            --data-dir "$BENCH_DATA/$name-$worker" >"$BENCH_DATA/$name-$worker.log" 2>&1 &
        bench_pids+=($!)
    done
    wait_up "http://127.0.0.1:$port/readyz"
}
start_cluster fd 1 "$PORT_FD" bench-host bench-host
start_cluster net 2 "$PORT_NET" bench-host-a bench-host-b

status=0
FAAS_URL_FD=http://127.0.0.1:$PORT_FD FAAS_URL_NET=http://127.0.0.1:$PORT_NET \
    FAAS_TOKEN=bench-admin-token FAAS_BIN=$FAAS_BIN \
    target/release/regions-spread || status=$?
for log in "$BENCH_DATA"/*.log; do
    if grep -q WARN "$log"; then
        echo
        echo "$(basename "$log") warnings ($(grep -c WARN "$log")), first 3:"
        grep WARN "$log" | head -3
    fi
done
exit $status
