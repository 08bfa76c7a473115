#!/usr/bin/env bash
# What tenants' routes cost the control plane: one more 128-route deploy, and a
# restart's restore of every saved workflow, with 1, 2 and 4 tenants each holding its
# whole quota (100 workflows of 128 routes). The gateway's route owners index and
# route table updated by one workflow's routes, against the peer in the same run: every
# new route checked against every deployed one, and the table rebuilt whole (as the
# gateway did before). In one process, no platform started (bench/src/bin/route-owners.rs).
#
#   bench/route-owners.sh
#   ROUTE_OWNERS_TENANTS=1,2,4,8 bench/route-owners.sh   # the peer's restart grows with the square
set -euo pipefail
cd "$(dirname "$0")/.."

echo "building the driver (release)"
cargo build --release -q -p faas-bench --bin route-owners
exec target/release/route-owners
