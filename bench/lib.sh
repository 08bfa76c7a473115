# Shared by the bench scripts (source it after `cd` to the repository root): processes
# started here are all stopped, and the scratch directory removed, on exit.

BENCH_DATA=$(mktemp -d)
bench_pids=()
bench_cleanup() {
    for pid in "${bench_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$BENCH_DATA"
}
trap bench_cleanup EXIT

# wait_up URL: polls until URL answers 2xx (30 s at most); fails the script otherwise.
wait_up() {
    for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "$1 did not come up" >&2
    exit 1
}

# The platform binary the scripts run: the release build unless FAAS_BIN names another
# (say, a copy of an earlier build, to compare two builds with the same script).
FAAS_BIN=${FAAS_BIN:-target/release/faas}

# start_faas PORT [faas up args...]: starts $FAAS_BIN's `faas up` on 127.0.0.1:PORT with
# admin token `bench-admin-token` (a platform refuses one under 16 bytes) and data
# directory $BENCH_DATA/faas-PORT (kept from a platform started before on PORT), logs to
# $BENCH_DATA/faas-PORT.log, sets FAAS_PID and waits until it is ready.
start_faas() {
    launch_faas "$@"
    wait_up "http://127.0.0.1:$1/readyz"
}

# launch_faas PORT [faas up args...]: start_faas without the wait.
launch_faas() {
    local port=$1
    shift
    FAAS_LOG=warn "$FAAS_BIN" up --listen "127.0.0.1:$port" --token bench-admin-token \
        --data-dir "$BENCH_DATA/faas-$port" "$@" >>"$BENCH_DATA/faas-$port.log" 2>&1 &
    FAAS_PID=$!
    bench_pids+=("$FAAS_PID")
}

# routes_workflow NAME TENANT COMPONENT PREFIX COUNT: prints a workflow.toml whose one
# function (COMPONENT) serves COUNT exact routes, PREFIX/1 to PREFIX/COUNT.
routes_workflow() {
    printf 'name = "%s"\ntenant = "%s"\n\n[functions.hello]\ncomponent = "%s"\n' "$1" "$2" "$3"
    for r in $(seq 1 "$5"); do
        printf '\n[[triggers.http]]\nroute = "%s/%d"\nfunction = "hello"\n' "$4" "$r"
    done
}

# since START [DECIMALS]: seconds since START (a `date +%s.%N`), to DECIMALS (2)
# decimals.
since() {
    awk -v a="$1" -v b="$(date +%s.%N)" -v d="${2:-2}" 'BEGIN { printf "%.*f", d, b - a }'
}

# start_redis [PORT]: starts a throwaway redis-server (no persistence) on 127.0.0.1, on
# PORT or else the first free port from 6390 up (so a developer's own Redis is left
# alone), sets REDIS_PORT and REDIS_URL and waits until it answers.
start_redis() {
    REDIS_PORT=${1:-6390}
    if [ -z "${1:-}" ]; then
        while (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; do REDIS_PORT=$((REDIS_PORT + 1)); done
    fi
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$BENCH_DATA" >"$BENCH_DATA/redis-$REDIS_PORT.log" 2>&1 &
    REDIS_PID=$!
    bench_pids+=("$REDIS_PID")
    for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    REDIS_URL=redis://127.0.0.1:$REDIS_PORT/
}

# ratio A B: A / B to two decimals (a throughput under load against alone).
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
}

# wrk_measure THREADS CONNECTIONS DURATION URL: one wrk run against URL; prints
# "req/s p50_ms p99_ms", and fails (exit 1) if any response was not 2xx.
wrk_measure() {
    wrk -t"$1" -c"$2" -d"$3" --latency "$4" | awk '
        function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
        /^ +50%/ { p50 = ms($2) } /^ +99%/ { p99 = ms($2) } /^Requests\/sec/ { rps = $2 }
        /Non-2xx/ { bad = $NF }
        END { if (bad) { print "non-2xx responses: " bad > "/dev/stderr"; exit 1 } printf "%.0f %.3f %.3f\n", rps, p50, p99 }'
}

# build_sensor_replay: builds the platform, the sensor replay driver and the sensor
# pipeline's three components (release), for the scripts that replay its trace.
build_sensor_replay() {
    echo "building (release)"
    cargo build --release -q -p faas-cli --bin faas
    cargo build --release -q -p faas-bench --bin sensor-replay
    (cd functions && cargo build --release -q -p sensor-collector -p sensor-assembler -p sensor-matcher)
}

# build_python_hello: builds the Python hello (bench/sizes/hello.py) with componentize-py
# (on PATH: testing/languages/install) into target/bench-sizes/hello-python.wasm, and
# prints that path.
build_python_hello() {
    local out=target/bench-sizes/hello-python.wasm
    mkdir -p "$(dirname "$out")"
    componentize-py -d wit -w wasi:http/proxy@0.2.12 componentize hello -p bench/sizes \
        -o "$out" >/dev/null
    echo "$out"
}

# build_js_hello: builds the JavaScript hello (bench/sizes/hello.js) with componentize-js
# (on PATH: testing/languages/install) into target/bench-sizes/hello-js.wasm, and prints
# that path.
build_js_hello() {
    local out=target/bench-sizes/hello-js.wasm
    mkdir -p "$(dirname "$out")"
    componentize-js bench/sizes/hello.js --wit wit --world-name wasi:http/proxy@0.2.12 \
        --disable fetch-event -o "$out" >/dev/null
    echo "$out"
}

# hello_workflow NAME TENANT COMPONENT ROUTE: prints the workflow.toml of a workflow NAME
# of TENANT whose one function, `hello`, runs COMPONENT for requests on ROUTE.
hello_workflow() {
    cat <<TOML
name = "$1"
tenant = "$2"

[functions.hello]
component = "$3"

[[triggers.http]]
route = "$4"
function = "hello"
TOML
}
