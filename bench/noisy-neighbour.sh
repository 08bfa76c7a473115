#!/usr/bin/env bash
# One tenant's attack against another tenant's requests: tenant B (`demo`) at 8
# connections, alone, then again while tenant A keeps ATTACKERS events of its attack
# running, each sent again at once when it ends. Prints both, and B's throughput under
# attack as a share of its throughput alone. ATTACK picks A:
#
# - `loops` (default): tenant `chaos`'s busy loops (/misbehave/loop, each interrupted
#   at its 1 s deadline); B is measured on /hello.
# - `kv-writes`: tenant `hog` overwrites one key with 1 MiB values for as long as its
#   1 s deadline lets it (kv-filler's /overwrite), within every quota, so the store
#   (the state database, `faas up`'s default) is as busy as A can make it; B is measured
#   on /hello and on a key-value read (kv-counter's GET /counter/bench). With
#   STORE=redis the key-value store is a throwaway redis-server (`faas up --redis`)
#   instead of the state database, and the script ends with what the scripts and SETs
#   it ran cost Redis per call (INFO commandstats).
# - `stream-appends` (needs STORE=redis, where streams live): tenant `hog` appends
#   1 MiB entries to one stream of its own for as long as its 1 s deadline lets it
#   (messenger's `op=append`), within every quota, so its streams sit at their byte
#   quota and every append trims; B is measured as with `kv-writes`, and the script
#   ends with Redis's cost per call of the scripts and stream commands.
# - `read-only-calls`: tenant `hog` runs the regions memories example
#   (functions/regions/memories.toml), its consumer the region probe `host-calls`: it
#   places its read-only input on 100 scattered spans of pages, then calls the host in
#   a loop for 900 ms, so that every host call's return puts the protection of 100
#   ranges back; B is measured on /hello.
#
#   bench/noisy-neighbour.sh                 # 10 s per measurement, 3 rounds
#   DURATION=20s ROUNDS=5 bench/noisy-neighbour.sh
#   ATTACK=kv-writes bench/noisy-neighbour.sh
#   ATTACK=kv-writes STORE=redis bench/noisy-neighbour.sh
#   ATTACK=stream-appends STORE=redis bench/noisy-neighbour.sh
#   ATTACK=read-only-calls ATTACKERS=2 bench/noisy-neighbour.sh
#
# Installs wrk (apt) if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-8}
ATTACKERS=${ATTACKERS:-16}
ATTACK=${ATTACK:-loops}
STORE=${STORE:-database}
PORT=3511

if ! command -v wrk >/dev/null 2>&1; then apt-get update -qq && apt-get install -y -qq wrk; fi

source bench/lib.sh
echo "building faas and the functions (release)"
cargo build --release -q -p faas-cli --bin faas
# hog_manifest NAME COMPONENT: writes $BENCH_DATA/NAME.toml, workflow NAME of tenant
# `hog`: the release build of COMPONENT (its file name without .wasm) on /NAME/...,
# with a 1 s deadline.
hog_manifest() {
    cat >"$BENCH_DATA/$1.toml" <<TOML
name = "$1"
tenant = "hog"

[functions.attack]
component = "$PWD/target/wasm32-wasip2/release/$2.wasm"
timeout_ms = 1000

[[triggers.http]]
route = "/$1/..."
function = "attack"
TOML
}

case "$ATTACK" in
    loops)
        (cd functions && cargo build --release -q -p hello -p misbehave)
        deploy=(--deploy functions/misbehave/workflow.toml)
        attack_path=/misbehave/loop
        attack_method=GET
        attack_name="busy loops"
        victims=(/hello)
        ;;
    kv-writes)
        (cd functions && cargo build --release -q -p hello -p kv-counter -p kv-filler)
        hog_manifest kv-filler kv_filler
        deploy=(--deploy "$BENCH_DATA/kv-filler.toml" --deploy functions/kv-counter/workflow.toml)
        attack_path=/kv-filler/overwrite/big
        attack_method=POST
        attack_name="1 MiB writers"
        victims=(/hello /counter/bench)
        ;;
    stream-appends)
        if [ "$STORE" != redis ]; then
            echo "ATTACK=stream-appends needs STORE=redis: streams live in Redis" >&2
            exit 2
        fi
        (cd functions && cargo build --release -q -p hello -p kv-counter -p messenger)
        hog_manifest appender messenger
        deploy=(--deploy "$BENCH_DATA/appender.toml" --deploy functions/kv-counter/workflow.toml)
        # Each event appends its 1 MiB body again and again until its deadline.
        attack_path="/appender/big?op=append&name=big&count=10000"
        attack_method=POST
        attack_body=1048576
        attack_name="1 MiB appenders"
        victims=(/hello /counter/bench)
        ;;
    read-only-calls)
        (cd functions && cargo build --release -q -p hello -p region-transfer -p region-probe)
        # The example as tenant hog's, its consumer the probe, within this worker's
        # memory limit, with the components where the release build put them.
        cp functions/regions/blob.km "$BENCH_DATA/"
        awk -v release="$PWD/target/wasm32-wasip2/release" '
            /^\[functions\.consume\]/ { consume = 1 }
            /^build = / { next }
            /^component = / {
                $0 = "component = \"" release "/" (consume ? "region_probe" : "region_transfer") ".wasm\""
            }
            /^config = \{ role = "consume" \}/ { $0 = "config = { probe = \"host-calls\", pairs = \"100\", ms = \"900\" }" }
            /^memory_mb = / { $0 = "memory_mb = 256" }
            { sub(/^tenant = "demo"/, "tenant = \"hog\""); print }
        ' functions/regions/memories.toml >"$BENCH_DATA/read-only-calls.toml"
        deploy=(--deploy "$BENCH_DATA/read-only-calls.toml")
        attack_path=/regions-memories
        attack_method=POST
        # The producer makes a value of this many bytes (one page: 100 spans of 2).
        attack_text=1000
        attack_name="read-only host calls"
        victims=(/hello)
        ;;
    *)
        echo "ATTACK must be loops, kv-writes, stream-appends or read-only-calls, not '$ATTACK'" >&2
        exit 2
        ;;
esac

case "$STORE" in
    database) ;;
    redis)
        start_redis
        deploy+=(--redis "$REDIS_URL")
        ;;
    *)
        echo "STORE must be database or redis, not '$STORE'" >&2
        exit 2
        ;;
esac

start_faas "$PORT" --deploy functions/hello/workflow.toml "${deploy[@]}"
URL=http://127.0.0.1:$PORT
printf 'wrk.method = "%s"\n' "$attack_method" >"$BENCH_DATA/attack.lua"
if [ -n "${attack_body:-}" ]; then
    printf 'wrk.body = string.rep("x", %d)\n' "$attack_body" >>"$BENCH_DATA/attack.lua"
fi
if [ -n "${attack_text:-}" ]; then
    printf 'wrk.body = "%s"\n' "$attack_text" >>"$BENCH_DATA/attack.lua"
fi
# The key B reads, where B reads one.
if [[ " ${victims[*]} " == *" /counter/bench "* ]]; then
    curl -sf -o /dev/null -X POST "$URL/counter/bench"
fi

echo "warming up"
for victim in "${victims[@]}"; do wrk -t1 -c2 -d2s "$URL$victim" >/dev/null; done

# tlb_shootdowns: the TLB shootdowns of every core so far (0 where none are counted).
tlb_shootdowns() { awk '/^ *TLB:/ { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i } END { print n + 0 }' /proc/interrupts; }

printf '\n%-6s %-16s %-28s %10s %9s\n' "round" "B's request" "while" "req/s" "p99 ms"
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    for victim in "${victims[@]}"; do
        # Prints "req/s p50_ms p99_ms" of B's victim path for one wrk run (bench/lib.sh).
        read -r alone_rps _ alone_p99 < <(wrk_measure 1 "$CONNECTIONS" "$DURATION" "$URL$victim")
        # The attack runs a little longer than the measurement, which starts once the
        # attack is under way.
        wrk -t1 -c"$ATTACKERS" -d"$(( ${DURATION%s} + 3 ))s" --timeout 5s \
            -s "$BENCH_DATA/attack.lua" "$URL$attack_path" >/dev/null 2>&1 &
        attack=$!
        sleep 1.5
        shootdowns_before=$(tlb_shootdowns)
        read -r attacked_rps _ attacked_p99 < <(wrk_measure 1 "$CONNECTIONS" "$DURATION" "$URL$victim")
        shootdowns=$(($(tlb_shootdowns) - shootdowns_before))
        wait "$attack" || true
        printf '%-6s %-16s %-28s %10s %9s\n' "$round" "$victim" "alone" "$alone_rps" "$alone_p99"
        printf '%-6s %-16s %-28s %10s %9s\n' "$round" "$victim" "$ATTACKERS $attack_name of A" "$attacked_rps" "$attacked_p99"
        # Every core's interrupts for another core's mprotect or munmap (x86 counts them).
        [ "$shootdowns" = 0 ] || echo "       (TLB shootdowns while B was measured under attack: $shootdowns)"
        ratios+=("$victim:$(ratio "$attacked_rps" "$alone_rps")")
    done
done
echo
echo "B's throughput under attack / alone, per round: ${ratios[*]} (goal: at least 0.5, p99 under 10 ms)"
if [ "$STORE" = redis ]; then
    # What the run's writes cost Redis's one thread, as it counts them: the scripts
    # (EVALSHA), plain SETs and stream commands it ran (those inside scripts too), with
    # their calls and microseconds each.
    echo "Redis time per command (INFO commandstats):"
    redis-cli -p "$REDIS_PORT" info commandstats | awk -F'[:,=]' '
        $1 ~ /^cmdstat_(evalsha|set|xadd|xrange|xdel|xtrim|rename)$/ {
            printf "  %-8s %9d calls %10.1f us each\n", substr($1, 9), $3, $7
        }'
fi
