#!/usr/bin/env bash
# Sensor pipeline replay (functions/sensors): a synthetic 2-sensor, 8 Hz perception
# trace replayed at 1x, 2x, 4x and 16x into the same three components deployed two
# ways — one workflow on one worker, and three workflows chained through Redis
# channels — with end-to-end latency per match. Starts its own redis-server and
# platform; everything is stopped on exit.
#
#   bench/sensor-replay.sh
#   SENSOR_RATES=4 SENSOR_TRACE_SECS=30 bench/sensor-replay.sh
#   SENSOR_MODES=channels SENSOR_RATES=16 bench/sensor-replay.sh    # one mode alone
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-3521}

source bench/lib.sh
build_sensor_replay
start_redis

start_faas "$PORT" --no-demo --redis "$REDIS_URL"
FAAS_LOG_FILE=$BENCH_DATA/faas-$PORT.log

# The driver deploys the four manifests, waits for the channel subscriptions and
# replays; the platform's warnings (failed runs) are shown afterwards if there are any.
status=0
FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench-admin-token FAAS_BIN=$FAAS_BIN REDIS_URL=$REDIS_URL \
    target/release/sensor-replay || status=$?
if grep -q WARN "$FAAS_LOG_FILE"; then
    echo
    echo "platform warnings ($(grep -c WARN "$FAAS_LOG_FILE")), first 5:"
    grep WARN "$FAAS_LOG_FILE" | head -5
fi
exit $status
