#!/usr/bin/env bash
# What a guest's stream append costs with the stream quota: the append script of
# `faas_store::stream_quota` (check, trim, count, append in one step) against the plain
# `XADD ... MAXLEN ~ 10000` it replaced, alternated in one run on one throwaway
# redis-server, from 64 appenders over one connection as a worker's guests append.
# Prints appends/s per round, then each way's range and its ratio to plain.
#
#   bench/stream-append.sh                  # 5 s per measurement, 3 rounds
#   SECONDS_EACH=10 ROUNDS=5 bench/stream-append.sh
#
# Needs redis-server on the PATH (.ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "building the driver (release)"
cargo build --release -q -p faas-bench --bin stream-append
target/release/stream-append "${SECONDS_EACH:-5}" "${ROUNDS:-3}"
