#!/usr/bin/env bash
# lock-bench.sh [--seconds S] [--threads N] [--clients K] - runs build/lock-bench (the Redis
# lock's figures, see bench/lock_bench.c) against a throwaway redis-server: started here on a free
# loopback port in a temporary directory, persistence off, and stopped by its PID at exit
# (on failure and Ctrl-C too).
#   LOCK_BENCH=path   the binary to run (default build/lock-bench, built if missing)
#   LOCK_BENCH_APPENDFSYNC=always   the server writes every command to an append-only file
#                     and fsyncs it before answering (what a Redlock node needs to come back
#                     from a crash with its keys: docs/course/15-redlock-servers.md); unset: off
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${LOCK_BENCH:-build/lock-bench}
[ -x "$bin" ] || make "$bin" >&2

dir=$(mktemp -d "${TMPDIR:-/tmp}/lock-bench.XXXXXX")
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Whether something listens on 127.0.0.1:$1.
port_busy() {
    ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

persist=()
case ${LOCK_BENCH_APPENDFSYNC:-} in
always) persist=(--appendonly yes --appendfsync always) ;;
"") ;;
*) echo "lock-bench.sh: LOCK_BENCH_APPENDFSYNC is always or unset" >&2; exit 2 ;;
esac
port=""
for _ in 1 2 3 4 5 6 7 8 9 10; do
    candidate=$((30000 + RANDOM % 30000))
    port_busy "$candidate" && continue
    redis-server --port "$candidate" --bind 127.0.0.1 --dir "$dir" --save "" \
        --appendonly no "${persist[@]}" --daemonize no --logfile "$dir/redis.log" &
    pid=$!
    for _ in $(seq 50); do
        # Ours must be alive: a PONG from someone else's server on that port does not count.
        kill -0 "$pid" 2>/dev/null || break
        if redis-cli -h 127.0.0.1 -p "$candidate" ping 2>/dev/null | grep -q PONG; then
            port=$candidate
            break
        fi
        sleep 0.1
    done
    if [ -n "$port" ] && kill -0 "$pid" 2>/dev/null; then
        break
    fi
    port=""
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
done
if [ -z "$port" ]; then
    echo "lock-bench.sh: redis-server did not start" >&2
    cat "$dir/redis.log" >&2 || true
    exit 1
fi

"$bin" --port "$port" "$@"
