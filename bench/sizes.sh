#!/usr/bin/env bash
# Components of four sizes through the platform, each against `wasmtime serve` on the
# same component, and a native hyper hello world, measured in turns in one run:
#   Rust        functions/wasi-hello (wstd), about 0.2 MB
#   Rust table  functions/wasi-table (wstd), about 4.4 MB: 4 MiB of read-only data that
#               each instance starts with (a dictionary, a model, an address table)
#   JavaScript  bench/sizes/hello.js, componentize-js, about 13 MB
#   Python      bench/sizes/hello.py, componentize-py, about 18 MB
# All four are plain wasi:http components (no platform imports), so `wasmtime serve`
# runs them as they are. Prints req/s and p99 per round, the ranges, the ratios to
# `wasmtime serve` and to native, and what one instance of each takes on the platform
# (the growth of the process's peak RSS at CONNECTIONS concurrent requests, divided by
# CONNECTIONS: an upper bound that includes their buffers), and how the platform reset
# each one's instances over the run (by written pages or whole, from its metrics).
#
#   bench/sizes.sh                    # 8 connections, 10 s per measurement, 3 rounds
#   DURATION=20s ROUNDS=5 bench/sizes.sh
#   FAAS_SLOT_RESET=written-pages bench/sizes.sh  # never move a component to whole
#   FAAS_SLOT_RESET=whole bench/sizes.sh          # resets (faas up --slot-reset), or
#                                                 # always reset slots whole
#
# Installs wrk (apt), wasmtime-cli 48.0.8 (cargo, into target/tools) and the language
# toolchains (testing/languages/install) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
WASMTIME_VERSION=48.0.8
TOOLS=target/tools
PORT_FAAS=3521 PORT_NATIVE=3522 PORT_RUST=3523 PORT_JS=3524 PORT_PY=3525 PORT_TABLE=3526

need() { command -v "$1" >/dev/null 2>&1; }
if ! need wrk; then apt-get update -qq && apt-get install -y -qq wrk; fi
WASMTIME="$TOOLS/bin/wasmtime"
if ! "$WASMTIME" --version 2>/dev/null | grep -q "$WASMTIME_VERSION"; then
    echo "installing wasmtime-cli $WASMTIME_VERSION (one-off, several minutes)"
    cargo install wasmtime-cli --version "$WASMTIME_VERSION" --locked --root "$TOOLS"
fi
PATH="$(testing/languages/install):$PATH"

source bench/lib.sh
echo "building faas, the native peer and the four components (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-gateway --example native_hello
(cd functions && cargo build --release -q -p wasi-hello -p wasi-table)
OUT=target/bench-sizes
mkdir -p "$OUT"
cp target/wasm32-wasip2/release/wasi-hello.wasm "$OUT/hello-rust.wasm"
cp target/wasm32-wasip2/release/wasi-table.wasm "$OUT/hello-table.wasm"
build_python_hello >/dev/null
build_js_hello >/dev/null

deploys=()
for lang in rust table js python; do
    hello_workflow "hello-$lang" demo "$PWD/$OUT/hello-$lang.wasm" "/hello-$lang" >"$BENCH_DATA/$lang.toml"
    deploys+=(--deploy "$BENCH_DATA/$lang.toml")
done
start_faas "$PORT_FAAS" "${deploys[@]}"
"$WASMTIME" serve -O pooling-allocator -S cli --addr 127.0.0.1:$PORT_RUST "$OUT/hello-rust.wasm" 2>/dev/null &
bench_pids+=($!)
"$WASMTIME" serve -O pooling-allocator -S cli --addr 127.0.0.1:$PORT_TABLE "$OUT/hello-table.wasm" 2>/dev/null &
bench_pids+=($!)
"$WASMTIME" serve -O pooling-allocator -S cli --addr 127.0.0.1:$PORT_JS "$OUT/hello-js.wasm" 2>/dev/null &
bench_pids+=($!)
"$WASMTIME" serve -O pooling-allocator -S cli --addr 127.0.0.1:$PORT_PY "$OUT/hello-python.wasm" 2>/dev/null &
bench_pids+=($!)
target/release/examples/native_hello 127.0.0.1:$PORT_NATIVE >/dev/null &
bench_pids+=($!)
# wasmtime serve compiles each component at start: about 10 s for the large ones.
for port in $PORT_RUST $PORT_TABLE $PORT_JS $PORT_PY $PORT_NATIVE; do
    for _ in $(seq 1 1200); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
    curl -sf -o /dev/null "http://127.0.0.1:$port/" || { echo "port $port did not come up" >&2; exit 1; }
done

# Prints "req/s p50_ms p99_ms" for one wrk run (bench/lib.sh).
measure() { wrk_measure "$THREADS" "$CONNECTIONS" "$DURATION" "$1"; }
kib() { awk -v k="$1" '$1 == k ":" { print $2 }' "/proc/$FAAS_PID/status"; }

names=(faas-rust wasmtime-rust faas-table wasmtime-table faas-js wasmtime-js faas-python wasmtime-python native)
urls=("http://127.0.0.1:$PORT_FAAS/hello-rust" "http://127.0.0.1:$PORT_RUST/"
    "http://127.0.0.1:$PORT_FAAS/hello-table" "http://127.0.0.1:$PORT_TABLE/"
    "http://127.0.0.1:$PORT_FAAS/hello-js" "http://127.0.0.1:$PORT_JS/"
    "http://127.0.0.1:$PORT_FAAS/hello-python" "http://127.0.0.1:$PORT_PY/"
    "http://127.0.0.1:$PORT_NATIVE/")

echo "warming up"
for url in "${urls[@]}"; do wrk -t1 -c2 -d2s "$url" >/dev/null; done

echo "memory per instance on the platform (peak RSS growth at $CONNECTIONS concurrent requests / $CONNECTIONS)"
for lang in rust table js python; do
    before=$(kib VmRSS)
    echo 5 >"/proc/$FAAS_PID/clear_refs"   # resets the peak (VmHWM) to the current RSS
    wrk -t"$THREADS" -c"$CONNECTIONS" -d3s "http://127.0.0.1:$PORT_FAAS/hello-$lang" >/dev/null
    peak=$(kib VmHWM)
    awk -v l="$lang" -v b="$before" -v p="$peak" -v c="$CONNECTIONS" -v size="$(stat -c %s "$OUT/hello-$lang.wasm")" \
        'BEGIN { printf "  %-8s component %6.1f MB   %6.1f MB per instance\n", l, size / 1e6, (p - b) / 1024 / c }'
done

echo "measuring: wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores, $ROUNDS rounds"
echo "platform slot resets: ${FAAS_SLOT_RESET:-by-function} (whole resets: ${FAAS_WHOLE_SLOT_RESET_MB:-16} MiB)"
printf '\n%-6s %-18s %10s %9s\n' "round" "server" "req/s" "p99 ms"
: >"$BENCH_DATA/results"
for round in $(seq 1 "$ROUNDS"); do
    for i in "${!names[@]}"; do
        read -r rps _ p99 < <(measure "${urls[$i]}")
        printf '%-6s %-18s %10s %9s\n' "$round" "${names[$i]}" "$rps" "$p99"
        echo "$round ${names[$i]} $rps $p99" >>"$BENCH_DATA/results"
    done
done

# How each component's instances were reset over the whole run, from the platform's
# own count (a component that moved shows both: its first events scan for written pages).
echo
echo "platform instance starts by slot reset (faas_instance_starts_total):"
metrics=$(curl -s -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:$PORT_FAAS/metrics")
for lang in rust table js python; do
    awk -v w="hello-$lang" '
        index($0, "faas_instance_starts_total{") == 1 && index($0, "workflow=\"" w "\"") {
            match($0, /slot_reset="[a-z-]+"/); mode = substr($0, RSTART + 12, RLENGTH - 13)
            starts[mode] = $NF
        }
        END { printf "  %-8s %10d written-pages %10d whole\n", substr(w, 7), starts["written-pages"], starts["whole"] }' <<<"$metrics"
done

awk '
    { rps[$1, $2] = $3; rounds[$1] = 1; p99[$2] = p99[$2] (p99[$2] == "" ? "" : " ") $4 }
    function range(name,   r, v, lo, hi, first) {
        first = 1
        for (r in rounds) { v = rps[r, name]; if (first || v < lo) lo = v; if (first || v > hi) hi = v; first = 0 }
        return sprintf("%d-%d", lo, hi)
    }
    function ratio(a, b,   r, v, lo, hi, first) {
        first = 1
        for (r in rounds) { v = rps[r, a] / rps[r, b]; if (first || v < lo) lo = v; if (first || v > hi) hi = v; first = 0 }
        return sprintf("%.2f-%.2fx", lo, hi)
    }
    END {
        printf "\n%-12s %16s %16s %16s %16s\n", "component", "faas req/s", "wasmtime req/s", "faas / wasmtime", "faas / native"
        split("rust table js python", langs, " ")
        for (i = 1; i <= 4; i++) {
            l = langs[i]
            printf "%-12s %16s %16s %16s %16s\n", l, range("faas-" l), range("wasmtime-" l), ratio("faas-" l, "wasmtime-" l), ratio("faas-" l, "native")
        }
        printf "%-12s %16s\n", "native", range("native")
    }' "$BENCH_DATA/results"
