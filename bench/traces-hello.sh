#!/usr/bin/env bash
# What exporting traces costs a hello world: `faas up` serving the SDK hello with export
# off (no OTEL_* variable: no exporter, no OpenTelemetry layer) and, in the same run,
# a second `faas up` exporting every request's spans over OTLP/HTTP to a real
# OpenTelemetry Collector (testing/otel/install-collector; its file exporter writes to
# /dev/null). The two platforms are measured in turns, ROUNDS times each, with the
# same wrk settings.
#
#   bench/traces-hello.sh                    # 8 connections, 10 s per run, 3 rounds
#   DURATION=20s ROUNDS=5 bench/traces-hello.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
PORT_OFF=3511 PORT_ON=3512 PORT_COLLECTOR=3513

if ! command -v wrk >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq wrk; fi
testing/otel/install-collector
# shellcheck source=../testing/otel/versions.env
. testing/otel/versions.env
COLLECTOR=${FAAS_TOOLS_DIR:-$HOME/.cache/faas-tools}/otelcol-$OTELCOL_VERSION/otelcol

echo "building faas and the functions (release)"
cargo build --release -q -p faas-cli --bin faas
(cd functions && cargo build --release -q -p hello)

source bench/lib.sh
# The trace tests' collector configuration, with the spans thrown away.
FAAS_OTELCOL_PORT=$PORT_COLLECTOR FAAS_OTELCOL_SPANS=/dev/null \
    "$COLLECTOR" --config testing/otel/collector.yaml >"$BENCH_DATA/collector.log" 2>&1 &
bench_pids+=($!)
for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT_COLLECTOR") 2>/dev/null && break
    sleep 0.1
done

start_faas "$PORT_OFF" --deploy functions/hello/workflow.toml
OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$PORT_COLLECTOR \
    start_faas "$PORT_ON" --deploy functions/hello/workflow.toml

# Prints "req/s p50_ms p99_ms" for one wrk run (bench/lib.sh).
measure() { wrk_measure "$THREADS" "$CONNECTIONS" "$DURATION" "$1"; }

echo "warming up"
for port in $PORT_OFF $PORT_ON; do wrk -t1 -c2 -d2s "http://127.0.0.1:$port/hello" >/dev/null; done

echo "measuring: wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores, $ROUNDS rounds"
printf '\n%-6s %-34s %10s %9s\n' "round" "hello (SDK)" "req/s" "p99 ms"
off_all=() on_all=()
for round in $(seq 1 "$ROUNDS"); do
    read -r off_rps _ off_p99 < <(measure "http://127.0.0.1:$PORT_OFF/hello")
    read -r on_rps _ on_p99 < <(measure "http://127.0.0.1:$PORT_ON/hello")
    printf '%-6s %-34s %10s %9s\n' "$round" "export off" "$off_rps" "$off_p99"
    printf '%-6s %-34s %10s %9s\n' "$round" "export on (OTLP/HTTP, collector)" "$on_rps" "$on_p99"
    off_all+=("$off_rps") on_all+=("$on_rps")
done
if grep -qi "error" "$BENCH_DATA/faas-$PORT_ON.log"; then
    echo "the exporting platform logged errors:" >&2
    grep -i "error" "$BENCH_DATA/faas-$PORT_ON.log" | head -5 >&2
fi
printf '%s\n' "${off_all[@]}" >"$BENCH_DATA/off" && printf '%s\n' "${on_all[@]}" >"$BENCH_DATA/on"
paste "$BENCH_DATA/off" "$BENCH_DATA/on" | awk '
    { off[NR] = $1; on[NR] = $2; r = $2 / $1; if (NR == 1 || r < lo) lo = r; if (NR == 1 || r > hi) hi = r }
    END { printf "\nexport on / export off, per round: %.2f-%.2f\n", lo, hi }'
