#!/usr/bin/env bash
# Where the sensor pipeline's CPU time goes, per match: the replay of
# bench/sensor-replay.sh at one rate, one deployment at a time (one workflow, then the
# three workflows chained through Redis channels), while `perf record` samples the
# platform process. Prints, per mode, the CPU time per match of the platform and of
# redis-server (from /proc, over the whole replay: deploying and the short warm-up
# included) and the platform's share by stage (bench/perf-stages.awk).
#
#   bench/profile-sensor.sh                        # 4x, an 80 s trace (20 s of replay)
#   RATE=16 SENSOR_TRACE_SECS=160 bench/profile-sensor.sh
#   PERF=0 bench/profile-sensor.sh                 # CPU time per match only, unsampled
#   SENSOR_MODES=channels bench/profile-sensor.sh  # one of the two modes only
#
# With FAAS_BIN set to another build (bench/lib.sh), alternated with runs of this one,
# it compares two builds' CPU time per match.
#
# Needs perf (Debian's linux-perf; installed if missing). Sampling is by timer
# (cpu-clock); it slows the platform by a tenth or so, and the figures include that.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=${RATE:-4}
PERF=${PERF:-1}
SENSOR_TRACE_SECS=${SENSOR_TRACE_SECS:-80}
PORT=3522

if [ "$PERF" != 0 ] && ! command -v perf >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq linux-perf; fi

source bench/lib.sh
build_sensor_replay
start_redis
start_faas "$PORT" --no-demo --redis "$REDIS_URL"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
ticks_per_second=$(getconf CLK_TCK)
for mode in ${SENSOR_MODES:-workflow channels}; do
    faas_before=$(cpu_ticks "$FAAS_PID")
    redis_before=$(cpu_ticks "$REDIS_PID")
    # perf samples the platform for as long as the driver runs.
    sampled=()
    if [ "$PERF" != 0 ]; then
        sampled=(perf record -q -F 999 -p "$FAAS_PID" -o "$BENCH_DATA/perf-$mode.data" --)
    fi
    FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench-admin-token FAAS_BIN=$FAAS_BIN REDIS_URL=$REDIS_URL \
        SENSOR_MODES=$mode SENSOR_RATES=$RATE SENSOR_TRACE_SECS=$SENSOR_TRACE_SECS \
        "${sampled[@]}" target/release/sensor-replay >"$BENCH_DATA/replay-$mode.txt" 2>/dev/null
    faas_ticks=$(($(cpu_ticks "$FAAS_PID") - faas_before))
    redis_ticks=$(($(cpu_ticks "$REDIS_PID") - redis_before))
    row=$(grep -E "^$mode " "$BENCH_DATA/replay-$mode.txt")
    received=$(awk '{ print $7 }' <<<"$row")
    per_match() { awk -v t="$1" -v hz="$ticks_per_second" -v n="$received" 'BEGIN { printf "%.1f", t / hz / n * 1e6 }'; }
    faas_us=$(per_match "$faas_ticks")

    echo
    echo "== $mode at ${RATE}x: $received matches; p50/p95/p99/max ms: $(awk '{ print $11 "/" $12 "/" $13 "/" $14 }' <<<"$row")"
    echo "CPU time per match: platform $faas_us us, redis-server $(per_match "$redis_ticks") us"
    [ "$PERF" != 0 ] || continue
    printf '%7s %8s  %s\n' "share" "us/match" "stage of the platform's (by the function a sample was taken in)"
    perf report -i "$BENCH_DATA/perf-$mode.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
        awk -v per="$faas_us" -f bench/perf-stages.awk | sort -rn
done
