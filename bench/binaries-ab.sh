#!/usr/bin/env bash
# binaries-ab.sh [--rounds 3] [--seconds 5] [--connections 64] [--loads dry,batch] BINARY... -
# two (or more) builds
# of the service compared on one running stack, in turn: each round restarts the stack's
# replicas on each binary (scripts/stack.sh replica-stop, then replica-start with STOCKD set)
# and puts the --loads through nginx, each a wrk run of --seconds with 2 threads: `dry`, the
# POST ceiling (POST /api/deduct/dry, which needs the replicas started with FAULTS=on);
# `batch`, a batched sale (POST /api/deduct in redis-batch, goods 999003); `redis`, a sale in
# the redis mode (goods 999002). Rounds alternate the binaries so that
# every figure has a neighbour the machine measured within a minute of it.
#
# Per load, one line: the binary's file name, the load, req/s (deduct.lua's RESULT line),
# how busy the machine was (both cores, /proc/stat), what the whole machine paid per request
# (`machine_us`: CPU µs of every process, wrk, nginx, the replicas, PostgreSQL and Redis, and
# anything else running) and what the replicas alone paid (`replica_us`: their utime + stime,
# /proc/<pid>/stat; `replica_switches`: their threads' context switches, from their /metrics'
# stock_process_context_switches_total, which keeps the count of threads that ended). The
# machine's figure is what bounds the rate when the cores are busy; the replicas' own is the
# one other work on a shared machine does not move.
#
# The stack is the one scripts/stack.sh names from the environment (RUN_DIR, HTTP_PORT and the
# other ports: see its header); the replicas are left running on the last binary. The batched
# goods are reset to a billion units first (a load never sells it out), and its books are
# left as the loads made them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib/books.sh
source "$ROOT/loadtest/lib/books.sh"
# shellcheck source=loadtest/lib/machine.sh
source "$ROOT/loadtest/lib/machine.sh"
# shellcheck source=loadtest/lib/metrics.sh
source "$ROOT/loadtest/lib/metrics.sh"

ROUNDS=3 SECONDS_PER=5 CONNECTIONS=64 LOADS=dry,batch
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=${2:?} && shift ;;
    --seconds) SECONDS_PER=${2:?} && shift ;;
    --connections) CONNECTIONS=${2:?} && shift ;;
    --loads) LOADS=${2:?} && shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
    -*) echo "binaries-ab: unknown option $1" >&2 && exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -ge 1 ] || { echo "binaries-ab: name at least one binary (see --help)" >&2; exit 2; }
for bin in "$@"; do
    [ -x "$bin" ] || { echo "binaries-ab: $bin is not an executable" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "binaries-ab: wrk not found" >&2; exit 1; }
BASE=http://127.0.0.1:${HTTP_PORT:-8080}
BATCH_GOODS=999003 REDIS_GOODS=999002
IFS=, read -ra LOAD_NAMES <<<"$LOADS"
for name in "${LOAD_NAMES[@]}"; do
    case $name in dry | batch | redis) ;; *) echo "binaries-ab: unknown load $name" >&2 && exit 2 ;; esac
done
mapfile -t REPLICA_IDS < <(seq 1 "${REPLICAS:-3}")

# The replicas' CPU ticks (utime + stime of each, from its PID file) and their context
# switches (loadtest/lib/metrics.sh: their /metrics), as "TICKS SWITCHES".
replicas() {
    local id run=${RUN_DIR:-$ROOT/.run} ticks=0 urls=()
    for id in "${REPLICA_IDS[@]}"; do
        ticks=$((ticks + $(awk '{ print $14 + $15 }' "/proc/$(cat "$run/replicas/svc-$id.pid")/stat")))
        urls+=("http://127.0.0.1:$(cat "$run/replicas/svc-$id.port")")
    done
    echo "$ticks $(metrics_context_switches "${urls[@]}")"
}

# One load: LABEL PATH deduct.lua's arguments...
load() {
    local label=$1 path=$2 out machine0 machine1 replicas0 replicas1 ctxt0 ctxt1
    shift 2
    out=$(mktemp)
    machine0=$(machine_ticks) replicas0=$(replicas) ctxt0=$(awk '$1 == "ctxt" { print $2 }' /proc/stat)
    wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_PER}s" --timeout 10s -s "$ROOT/loadtest/deduct.lua" \
        "$BASE$path" -- threads=2 "$@" >"$out" 2>&1 || true
    machine1=$(machine_ticks) replicas1=$(replicas) ctxt1=$(awk '$1 == "ctxt" { print $2 }' /proc/stat)
    awk -v label="$label" -v m0="$machine0" -v m1="$machine1" -v r0="$replicas0" -v r1="$replicas1" \
        -v ctxt=$((ctxt1 - ctxt0)) -v busy="$(machine_busy "$machine0" "$machine1")" \
        -v hz="$(getconf CLK_TCK)" '
        /^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END {
            split(m0, a, " "); split(m1, b, " "); split(r0, c, " "); split(r1, d, " ")
            n = v["requests"]
            if (n <= 0) { printf "%s rps=0 (no RESULT line)\n", label; exit }
            printf "%s rps=%.0f busy=%s machine_us=%.0f machine_switches=%.1f replica_us=%.0f replica_switches=%.2f\n",
                label, v["rps"], busy, (b[1] - a[1]) * 1e6 / hz / n, ctxt / n,
                (d[1] - c[1]) * 1e6 / hz / n, (d[2] - c[2]) / n
        }' "$out"
    rm -f "$out"
}

books_reset "$BASE" 1000000000 "$REDIS_GOODS" 2 >/dev/null || exit 1
for ((round = 1; round <= ROUNDS; round++)); do
    for bin in "$@"; do
        "$ROOT/scripts/stack.sh" replica-stop "${REPLICA_IDS[@]}" >/dev/null 2>&1 || true
        STOCKD=$bin "$ROOT/scripts/stack.sh" replica-start "${REPLICA_IDS[@]}" >/dev/null ||
            { echo "binaries-ab: the replicas did not start on $bin" >&2; exit 1; }
        name=$(basename "$bin")
        for what in "${LOAD_NAMES[@]}"; do
            case $what in
            dry) load "$name r$round dry" /api/deduct/dry goods=1 ;;
            batch) load "$name r$round batch" /api/deduct mode=redis-batch goods=$BATCH_GOODS ;;
            redis) load "$name r$round redis" /api/deduct mode=redis goods=$REDIS_GOODS ;;
            esac
        done
    done
done
