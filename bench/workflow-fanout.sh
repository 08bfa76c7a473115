#!/usr/bin/env bash
# Fan-out/fan-in workflow (1, 4, 16, 64 branches) against the same functions chained
# with separate HTTP calls, measured in the same run against one platform process.
#
#   bench/workflow-fanout.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-3511}

echo "building (release)"
cargo build --release -q -p faas-cli --bin faas
cargo build --release -q -p faas-bench --bin workflow-fanout
(cd functions && cargo build --release -q -p fanout-bench)

source bench/lib.sh
# The HTTP chain's throughput stage has 4 clients each sending 64 `work` calls at once,
# all from one address: the gateway's default cap of 256 connections per client
# address would close some of them as they are accepted.
start_faas "$PORT" --no-demo --max-connections-per-client 1024

FAAS_URL=http://127.0.0.1:$PORT FAAS_TOKEN=bench-admin-token FAAS_BIN=$FAAS_BIN \
    target/release/workflow-fanout
