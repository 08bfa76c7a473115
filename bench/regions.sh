#!/usr/bin/env bash
# Regions (functions/regions): an A→B chain handing over 1, 10, 100 and 512 MiB through
# regions mapped into the consumer, through regions copied once (a second platform with
# `--region-map-threshold off`), and over HTTP with JSON bodies (the serializing
# baseline, functions/regions/http-chain); then a 10 MiB region fanned out to 1, 4, 16
# and 64 consumers. Handoff, end-to-end and wall latency, and the platform's CPU time
# per run, all in the same run on this machine.
#
# With --sweep (or REGIONS_SWEEP=1) it measures the map threshold instead: the A→B chain
# at 16 KiB to 1 MiB, the first platform mapping every region (`--region-map-threshold
# 0`) against the second copying every one, the two alternating run by run.
#
#   bench/regions.sh
#   REGIONS_SIZES_MIB=1,100 REGIONS_BRANCHES=4 bench/regions.sh
#   bench/regions.sh --sweep
#   REGIONS_SWEEP_KIB=64,256 REGIONS_SWEEP_RUNS=500 bench/regions.sh --sweep
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-3531}
PORT_COPY=${PORT_COPY:-3532}
SWEEP=${REGIONS_SWEEP:-0}
for arg in "$@"; do
    case $arg in
    --sweep) SWEEP=1 ;;
    *) echo "usage: $0 [--sweep]" >&2; exit 2 ;;
    esac
done

echo "building (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-bench --bin regions
(cd functions && cargo build --release -q -p region-transfer)
[ "$SWEEP" = 1 ] || (cd functions && cargo build --release -q -p region-http-chain)

source bench/lib.sh
# 512 MiB over JSON is a 683 MiB body, and each side of it holds about 1.2 GiB of
# linear memory (the manifests ask for up to 2000 MiB). The gateway counts a body
# twice while its chunks are joined, so its body budgets (64 MiB per client by
# default) must hold 1.4 GiB.
# The HTTP chain's producer posts to the consumer through the platform on loopback,
# which outbound HTTP reaches only where the operator opened it.
LIMITS=(--no-demo --max-memory-mb 2100 --max-body-bytes 1000000000
    --body-budget-mb 2048 --client-body-budget-mb 2048
    --outbound-private-networks 127.0.0.1)
SWEEP_ARG=
if [ "$SWEEP" = 1 ]; then
    SWEEP_ARG=--sweep
    start_faas "$PORT" "${LIMITS[@]}" --region-map-threshold 0
else
    start_faas "$PORT" "${LIMITS[@]}"
fi
PID_MAP=$FAAS_PID
start_faas "$PORT_COPY" "${LIMITS[@]}" --region-map-threshold off
PID_COPY=$FAAS_PID

status=0
FAAS_URL=http://127.0.0.1:$PORT FAAS_PID=$PID_MAP \
    FAAS_URL_COPY=http://127.0.0.1:$PORT_COPY FAAS_PID_COPY=$PID_COPY \
    FAAS_TOKEN=bench-admin-token FAAS_BIN=$FAAS_BIN \
    target/release/regions ${SWEEP_ARG:+"$SWEEP_ARG"} || status=$?
for port in "$PORT" "$PORT_COPY"; do
    log=$BENCH_DATA/faas-$port.log
    if grep -q WARN "$log"; then
        echo
        echo "platform on :$port warnings ($(grep -c WARN "$log")), first 5:"
        grep WARN "$log" | head -5
    fi
done
exit $status
