#!/usr/bin/env bash
# What a guest's stream append costs with the stream quota: the platform's append of
# `faas_store::stream_quota` (check, trim, count, append in one step) against a plain
# `XADD ... MAXLEN`, alternated in one run on one throwaway redis-server, from 64
# appenders over one connection as a worker's guests append: 200-byte entries (the
# script, against the `XADD ... MAXLEN ~ 10000` it replaced) and 1 MiB entries (the
# transaction that keeps them out of Lua, against `XADD ... MAXLEN = 64`). Prints
# appends/s per round, then each way's range and its ratio to the plain append of its
# size.
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
