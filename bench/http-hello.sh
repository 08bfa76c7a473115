#!/usr/bin/env bash
# HTTP hello world through the faas gateway, against `wasmtime serve` (same wasmtime
# version as the worker) on the same component, and a native hyper hello world, all
# measured with the same wrk settings in the same run.
#
#   bench/http-hello.sh              # 8 connections, 10 s per run
#   DURATION=30s CONNECTIONS=8 bench/http-hello.sh
#
# Then the same over HTTP/2 (h2c, prior knowledge) with h2load, STREAMS concurrent
# streams per connection (10 by default), against the gateway and native hyper
# (`wasmtime serve` speaks HTTP/1.1 only).
#
# Installs wrk and h2load (apt: wrk, nghttp2-client) and wasmtime-cli 48.0.8 (cargo,
# into target/tools) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
STREAMS=${STREAMS:-10}
WASMTIME_VERSION=48.0.8
TOOLS=target/tools
PORT_FAAS=3501 PORT_WASMTIME=3502 PORT_NATIVE=3503

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk || ! need h2load; then
    apt-get update -qq && apt-get install -y -qq wrk nghttp2-client
fi
WASMTIME="$TOOLS/bin/wasmtime"
if ! "$WASMTIME" --version 2>/dev/null | grep -q "$WASMTIME_VERSION"; then
    echo "installing wasmtime-cli $WASMTIME_VERSION (one-off, several minutes)"
    cargo install wasmtime-cli --version "$WASMTIME_VERSION" --locked --root "$TOOLS"
fi

echo "building faas, the native peer and the functions (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-gateway --example native_hello
(cd functions && cargo build --release -q)
COMPONENT=target/wasm32-wasip2/release/wasi-hello.wasm
SDK_COMPONENT=target/wasm32-wasip2/release/hello.wasm

source bench/lib.sh
start_faas "$PORT_FAAS" --deploy functions/wasi-hello/workflow.toml \
    --deploy functions/hello/workflow.toml
"$WASMTIME" serve -O pooling-allocator -S cli --addr 127.0.0.1:$PORT_WASMTIME "$COMPONENT" 2>/dev/null &
bench_pids+=($!)
target/release/examples/native_hello 127.0.0.1:$PORT_NATIVE >/dev/null &
bench_pids+=($!)
wait_up http://127.0.0.1:$PORT_WASMTIME/
wait_up http://127.0.0.1:$PORT_NATIVE/

# Prints "req/s p50_ms p99_ms" for one wrk run (bench/lib.sh).
measure() { wrk_measure "$THREADS" "$CONNECTIONS" "$DURATION" "$1"; }

echo "warming up"
for url in http://127.0.0.1:$PORT_FAAS/wasi-hello http://127.0.0.1:$PORT_WASMTIME/ http://127.0.0.1:$PORT_NATIVE/; do
    wrk -t1 -c2 -d2s "$url" >/dev/null
done

echo "measuring: wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores"
read -r faas_rps faas_p50 faas_p99 < <(measure http://127.0.0.1:$PORT_FAAS/wasi-hello)
read -r sdk_rps sdk_p50 sdk_p99 < <(measure "http://127.0.0.1:$PORT_FAAS/hello")
read -r wt_rps wt_p50 wt_p99 < <(measure http://127.0.0.1:$PORT_WASMTIME/)
read -r nat_rps nat_p50 nat_p99 < <(measure http://127.0.0.1:$PORT_NATIVE/)

printf '\n%-44s %10s %9s %9s\n' "server" "req/s" "p50 ms" "p99 ms"
printf '%-44s %10s %9s %9s\n' "faas gateway, wasi-hello.wasm" "$faas_rps" "$faas_p50" "$faas_p99"
printf '%-44s %10s %9s %9s\n' "faas gateway, hello.wasm (SDK)" "$sdk_rps" "$sdk_p50" "$sdk_p99"
printf '%-44s %10s %9s %9s\n' "wasmtime serve $WASMTIME_VERSION, wasi-hello.wasm" "$wt_rps" "$wt_p50" "$wt_p99"
printf '%-44s %10s %9s %9s\n' "native hyper hello world" "$nat_rps" "$nat_p50" "$nat_p99"
awk -v f="$faas_rps" -v w="$wt_rps" -v n="$nat_rps" 'BEGIN {
    printf "\nfaas / wasmtime serve: %.2fx   faas / native hyper: %.2fx\n", f / w, f / n }'

# Prints "req/s mean_ms" for one h2load run (h2load reports no percentiles).
measure_h2() {
    h2load -t"$THREADS" -c"$CONNECTIONS" -m"$STREAMS" -D"${DURATION%s}" "$1" | awk '
        function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
        /^finished in/ { rps = $4 } /^time for request:/ { mean = ms($6) }
        /^requests:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^failed/) failed = $i }
        END { if (failed + 0 > 0) { print "failed requests: " failed > "/dev/stderr"; exit 1 }
              printf "%.0f %.3f\n", rps, mean }'
}

echo
echo "measuring over HTTP/2: h2load -t$THREADS -c$CONNECTIONS -m$STREAMS -D${DURATION%s}"
read -r faas_h2_rps faas_h2_mean < <(measure_h2 http://127.0.0.1:$PORT_FAAS/wasi-hello)
read -r nat_h2_rps nat_h2_mean < <(measure_h2 http://127.0.0.1:$PORT_NATIVE/)
printf '\n%-44s %10s %9s\n' "server (HTTP/2)" "req/s" "mean ms"
printf '%-44s %10s %9s\n' "faas gateway, wasi-hello.wasm" "$faas_h2_rps" "$faas_h2_mean"
printf '%-44s %10s %9s\n' "native hyper hello world" "$nat_h2_rps" "$nat_h2_mean"
awk -v f="$faas_h2_rps" -v n="$nat_h2_rps" -v f1="$faas_rps" 'BEGIN {
    printf "\nHTTP/2: faas / native hyper: %.2fx   faas over HTTP/2 / over HTTP/1.1: %.2fx\n", f / n, f / f1 }'
