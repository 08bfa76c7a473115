#!/usr/bin/env bash
# What each slot reset costs the platform per request of an interpreter: the JavaScript
# and Python hellos of bench/sizes.sh, served with `faas up --slot-reset whole` and with
# `--slot-reset written-pages`, the two alternating run by run (their order swapped every
# round). Each run is a fresh platform, warmed up for 3 s, then measured with wrk for
# DURATION. For each run it prints req/s and the platform's CPU time per request: in
# all, on the guest threads (`faas-guest`: an instance's slices after its first), on
# the tokio workers (the gateway, hyper, and each event's first slice, where its
# instance is created) and on the rest; then, per component, the ranges per reset and
# written-pages / whole of the CPU per request, round by round.
#
# This is what the worker's per-function choice of reset (README, "Slot resets, chosen
# per function") has to predict: which reset costs the process less per request.
#
#   bench/reset-cpu.sh                 # 8 connections, 10 s per run, 3 rounds
#   ROUNDS=5 DURATION=20s bench/reset-cpu.sh
#
# Installs wrk (apt) and the language toolchains (testing/languages/install) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
PORT_JS=3531 PORT_PY=3532
case $DURATION in *[0-9]s) ;; *) echo "DURATION must be in seconds, like 10s" >&2; exit 1 ;; esac

command -v wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }
PATH="$(testing/languages/install):$PATH"

source bench/lib.sh
echo "building faas and the two components (release)"
cargo build --release -q -p faas-cli --bin faas
declare -A components ports=([js]=$PORT_JS [python]=$PORT_PY)
components[js]=$(build_js_hello)
components[python]=$(build_python_hello)
for lang in js python; do
    hello_workflow "hello-$lang" demo "$PWD/${components[$lang]}" /hello >"$BENCH_DATA/$lang.toml"
done

TICK=$(getconf CLK_TCK)
# cpu_ticks PID: "all guest tokio", the CPU clock ticks the process and its guest and
# tokio worker threads have used (the process's count includes threads that ended).
cpu_ticks() {
    local all guest=0 tokio=0 task comm ticks
    all=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
    for task in /proc/"$1"/task/*; do
        comm=$(cat "$task/comm" 2>/dev/null) || continue
        ticks=$(awk '{ print $14 + $15 }' "$task/stat" 2>/dev/null) || continue
        case $comm in
        faas-guest*) guest=$((guest + ticks)) ;;
        tokio-rt-work*) tokio=$((tokio + ticks)) ;;
        esac
    done
    echo "$all $guest $tokio"
}

# run LANG MODE ROUND: one measured run; prints its row.
run() {
    local lang=$1 mode=$2 round=$3 port=${ports[$1]} before after measured
    start_faas "$port" --slot-reset "$mode" --deploy "$BENCH_DATA/$lang.toml"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d3s "http://127.0.0.1:$port/hello" >/dev/null
    before=$(cpu_ticks "$FAAS_PID")
    measured=$(wrk_measure "$THREADS" "$CONNECTIONS" "$DURATION" "http://127.0.0.1:$port/hello")
    after=$(cpu_ticks "$FAAS_PID")
    kill "$FAAS_PID"
    wait "$FAAS_PID" 2>/dev/null || true
    # µs per request = ticks * 1e6 / TICK / (req/s * seconds)
    awk -v r="$round" -v l="$lang" -v m="$mode" -v b="$before" -v a="$after" -v t="$TICK" \
        -v s="${DURATION%s}" -v rps="${measured%% *}" 'BEGIN {
            split(b, x); split(a, y); n = rps * s; k = 1e6 / t / n
            all = (y[1] - x[1]) * k; guest = (y[2] - x[2]) * k; tokio = (y[3] - x[3]) * k
            printf "%-5s  %-6s  %-13s  %6d  %8.0f  %8.0f  %8.0f  %8.0f\n", r, l, m, rps, all, guest, tokio, all - guest - tokio
        }'
}

echo "measuring: wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $(nproc) cores, $ROUNDS rounds"
echo
printf "%-5s  %-6s  %-13s  %6s  %8s  %8s  %8s  %8s\n" round comp reset req/s "us/req" guest tokio rest
rows=$BENCH_DATA/rows
for round in $(seq 1 "$ROUNDS"); do
    modes=(whole written-pages)
    [ $((round % 2)) -eq 0 ] && modes=(written-pages whole)
    for lang in js python; do
        for mode in "${modes[@]}"; do
            run "$lang" "$mode" "$round" | tee -a "$rows"
        done
    done
done

echo
echo "platform CPU per request (us), ranges over the rounds; written-pages / whole paired by round"
awk '
    { rps[$2, $3] = rps[$2, $3] " " $4; us[$2, $3] = us[$2, $3] " " $5; cpu[$1, $2, $3] = $5; rounds[$1] = 1 }
    function range(list,    v, n, i, lo, hi) {
        n = split(list, v, " "); lo = hi = v[1]
        for (i = 2; i <= n; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] }
        return lo "-" hi
    }
    END {
        printf "%-7s %-15s %-15s %-15s %-15s %s\n", "comp", "whole req/s", "written req/s", "whole us/req", "written us/req", "written/whole us/req"
        for (c = 1; c <= 2; c++) {
            l = c == 1 ? "js" : "python"; ratios = ""
            for (r in rounds) ratios = ratios " " sprintf("%.2f", cpu[r, l, "written-pages"] / cpu[r, l, "whole"])
            printf "%-7s %-15s %-15s %-15s %-15s %s\n", l, range(rps[l, "whole"]), range(rps[l, "written-pages"]),
                range(us[l, "whole"]), range(us[l, "written-pages"]), range(ratios)
        }
    }' "$rows"
