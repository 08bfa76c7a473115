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

echo "building (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-bench --bin sensor-replay
(cd functions && cargo build --release -q -p sensor-collector -p sensor-assembler -p sensor-matcher)

# The first free port from 6390 up, so a developer's own Redis is left alone.
REDIS_PORT=6390
while (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; do REDIS_PORT=$((REDIS_PORT + 1)); done

source bench/lib.sh
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$BENCH_DATA" >"$BENCH_DATA/redis.log" 2>&1 &
bench_pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/

start_faas "$PORT" --no-demo --redis "$REDIS_URL"
FAAS_LOG_FILE=$BENCH_DATA/faas-$PORT.log

# The driver deploys the four manifests, waits for the channel subscriptions and
# replays; the platform's warnings (failed runs) are shown afterwards if there are any.
status=0
FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench FAAS_BIN=$FAAS_BIN REDIS_URL=$REDIS_URL \
    target/release/sensor-replay || status=$?
if grep -q WARN "$FAAS_LOG_FILE"; then
    echo
    echo "platform warnings ($(grep -c WARN "$FAAS_LOG_FILE")), first 5:"
    grep WARN "$FAAS_LOG_FILE" | head -5
fi
exit $status
