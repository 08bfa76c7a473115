#!/usr/bin/env bash
# A compute-heavy guest against its native build: LRU and LFU cache replacement
# simulations over a deterministic 2M-request trace (functions/cachesim; the core,
# functions/cachesim/core, is compiled natively into target/release/cachesim too).
# Each run times, one after the other:
#   - the native binary (wall time of the process),
#   - the component through the platform without a fuel limit (`faas up`, GET
#     /cachesim, end to end with curl),
#   - the same component with a fuel limit (functions/cachesim/fuel.toml, so it runs on
#     the fuel-metered engine).
# Every run must print the same result line (hit counts and checksum); the script
# fails otherwise.
#
#   bench/cachesim.sh                 # RUNS=5 REQUESTS=2000000 CAPACITY=65536
#   RUNS=10 CAPACITY=16384 bench/cachesim.sh
#   OPT_LEVEL=s bench/cachesim.sh     # the guest built at another opt-level (its own
#                                     # target dir); functions/Cargo.toml gives it 3
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
REQUESTS=${REQUESTS:-2000000}
CAPACITY=${CAPACITY:-65536}
PORT=${PORT:-3521}
QUERY="requests=$REQUESTS&capacity=$CAPACITY"

echo "building faas, the native build and the function (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-bench --bin cachesim
COMPONENT=target/wasm32-wasip2/release/cachesim.wasm
if [ -n "${OPT_LEVEL:-}" ]; then
    level=$OPT_LEVEL
    [[ $level =~ ^[0-3]$ ]] || level="\"$level\""
    (cd functions && cargo build --release -q -p cachesim --target-dir "../target/cachesim-opt-$OPT_LEVEL" \
        --config "profile.release.package.cachesim.opt-level=$level" \
        --config "profile.release.package.cachesim-core.opt-level=$level")
    COMPONENT=target/cachesim-opt-$OPT_LEVEL/wasm32-wasip2/release/cachesim.wasm
else
    (cd functions && cargo build --release -q -p cachesim)
fi

source bench/lib.sh
# Both manifests, pointed at the component just built.
for manifest in workflow fuel; do
    sed -e "s|^component = .*|component = \"$PWD/$COMPONENT\"|" -e '/^build = /d' \
        "functions/cachesim/$manifest.toml" >"$BENCH_DATA/$manifest.toml"
done
start_faas "$PORT" --deploy "$BENCH_DATA/workflow.toml" --deploy "$BENCH_DATA/fuel.toml"
FUEL=$(sed -n 's/^fuel = //p' functions/cachesim/fuel.toml)

# Each prints "milliseconds" and leaves the result line in $BENCH_DATA/<mode>.out.
native() {
    local start end
    start=$(date +%s%N)
    target/release/cachesim "$QUERY" >"$BENCH_DATA/native.out"
    end=$(date +%s%N)
    awk -v ns=$((end - start)) 'BEGIN { printf "%.1f\n", ns / 1e6 }'
}
platform() { # PATH MODE
    curl -sSf -o "$BENCH_DATA/$2.out" -w '%{time_total}\n' \
        "http://127.0.0.1:$PORT$1?$QUERY" | awk '{ printf "%.1f\n", $1 * 1000 }'
}

# The first instance of each function faults its pool slot in; the first native run
# reads the binary. Neither is measured.
native >/dev/null
platform /cachesim faas >/dev/null
platform /cachesim-fuel fuel >/dev/null
expected=$(cat "$BENCH_DATA/native.out")
echo "result: $expected"

check() { # MODE
    local got
    got=$(cat "$BENCH_DATA/$1.out")
    if [ "$got" != "$expected" ]; then
        echo "$1 computed something else: $got" >&2
        exit 1
    fi
}

echo "measuring: $RUNS runs, $QUERY, guest opt-level ${OPT_LEVEL:-3}, on $(nproc) cores"
: >"$BENCH_DATA/times"
for run in $(seq 1 "$RUNS"); do
    n=$(native) && check native
    f=$(platform /cachesim faas) && check faas
    m=$(platform /cachesim-fuel fuel) && check fuel
    echo "$run $n $f $m" | tee -a "$BENCH_DATA/times"
done

awk -v fuel="$FUEL" '
    function sort(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    }
    function median(a, n) { return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
    function row(name, a, r, lo, hi) {
        sort(a, N); sort(r, N)
        line = sprintf("%-38s %8.1f %8.1f %8.1f", name, a[1], median(a, N), a[N])
        if (hi) line = line sprintf("   %.2fx (%.2f-%.2fx)", median(r, N), r[1], r[N])
        print line
    }
    { N++; nat[N] = $2; faas[N] = $3; met[N] = $4
      rf[N] = $3 / $2; rm[N] = $4 / $2; fuel_cost[N] = $4 / $3 }
    END {
        printf "\n%-38s %8s %8s %8s   %s\n", "mode", "min ms", "p50 ms", "max ms", "x native, p50 (range over runs)"
        row("native (cargo --release)", nat, rf, 0, 0)
        row("faas, no fuel limit", faas, rf, 1, 1)
        row("faas, fuel = " fuel, met, rm, 1, 1)
        sort(fuel_cost, N)
        printf "\nfuel metering costs %.2fx (%.2f-%.2fx over runs)\n", median(fuel_cost, N), fuel_cost[1], fuel_cost[N]
        sort(rf, N)
        printf "goal, at most 1.5x native without fuel: %s\n", median(rf, N) <= 1.5 ? "met" : "MISSED"
    }' "$BENCH_DATA/times"
