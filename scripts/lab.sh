#!/usr/bin/env bash
# lab.sh - the lab's stack: where a learner steps real requests through a rung (web/lab/).
#
#   scripts/lab.sh up      start it (scripts/stack.sh with the settings below), print the page
#   scripts/lab.sh down    stop it, by PID (the database files stay in LAB_RUN_DIR)
#   scripts/lab.sh status
#
# A stack of its own (its own RUN_DIR and ports, so a `make up` stack is not touched) whose
# replicas run with fault injection on (FAULTS=on: the lab's hold-at and its routes) and the
# ladder's short timings, so that a lease runs out while the learner watches:
#   LOCK_WAIT_MS=1000 LOCK_FIXED_LEASE_MS=1500 LOCK_LEASE_MS=1500 LOCKROW_TTL_MS=1500
# and a held request's hold budget of LAB_HOLD_MS=60000 (then it goes on by itself). nginx
# serves the page at /lab/ and each replica's API at /replica/N/api/ (NGINX_LAB=1).
# A replica that dies (the crash level ends svc-N's process) is started again by a watcher
# process, which `down` stops too.
#
# Environment: LAB_RUN_DIR (.run-lab), LAB_HTTP_PORT (8090; the replicas listen on the three
# ports after it), LAB_PG_PORT (15472), LAB_REDIS_PORT (16419), STOCKD (build/stockd).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RUN_DIR=${LAB_RUN_DIR:-$ROOT/.run-lab}
export HTTP_PORT=${LAB_HTTP_PORT:-8090}
export REPLICA_PORT_BASE=$((HTTP_PORT + 1))
export PG_PORT=${LAB_PG_PORT:-15472}
export REDIS_PORT=${LAB_REDIS_PORT:-16419}
# Only what the levels need: no Redlock nodes, etcd, ZooKeeper nor Sentinels, whatever the
# caller's environment says (the test harness exports its own stack's settings).
export REDLOCK_SERVERS=0 WITH_ETCD=0 WITH_ZOOKEEPER=0 HA=0 CLUSTER=0
unset ETCD_ENDPOINT ZOOKEEPER_HOSTS REDIS_SENTINELS ETCD_PORT ETCD_PEER_PORT ZK_PORT \
    REDLOCK_NODES REDIS_CLUSTER_NODES ADMIN_TOKEN BUSINESS_DELAY_MS
export REPLICAS=3 FAULTS=on MODE=redis NGINX_LAB=1
export LOCK_WAIT_MS=1000 LOCK_FIXED_LEASE_MS=1500 LOCK_LEASE_MS=1500 LOCKROW_TTL_MS=1500
export LAB_HOLD_MS=${LAB_HOLD_MS:-60000}
# A learner holds a request inside its transaction for minutes: the database's lease on it
# (DB_IDLE_IN_TX_MS, 30 s by default) must outlast every hold of a level.
export DB_IDLE_IN_TX_MS=${DB_IDLE_IN_TX_MS:-600000}
export LOG_LEVEL=${LOG_LEVEL:-warn}
STACK=$ROOT/scripts/stack.sh
WATCH_PID=$RUN_DIR/lab-watch.pid

say() { printf 'lab: %s\n' "$*" >&2; }

# The watcher: every second, a replica that is not running is started again (the crash
# level's svc-N ended itself). It stops when its PID file goes (down removes it first).
watch_replicas() {
    local n
    while [ -e "$WATCH_PID" ]; do
        sleep 1
        for n in 1 2 3; do
            [ -e "$WATCH_PID" ] || return 0
            if ! curl -fsS -o /dev/null -m 2 "http://127.0.0.1:$((REPLICA_PORT_BASE + n - 1))/healthz" 2>/dev/null; then
                "$STACK" replica-start "$n" >>"$RUN_DIR/logs/lab-watch.log" 2>&1 || true
            fi
        done
    done
}

watcher_pid() {
    local pid
    [ -s "$WATCH_PID" ] || return 1
    read -r pid <"$WATCH_PID"
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

cmd_up() {
    "$STACK" up || {
        say "the stack did not start (scripts/stack.sh logs, with LAB_RUN_DIR's settings)"
        exit 1
    }
    if ! watcher_pid >/dev/null; then
        mkdir -p "$RUN_DIR/logs"
        touch "$WATCH_PID"
        (
            trap '' HUP
            watch_replicas
        ) </dev/null >/dev/null 2>&1 &
        echo $! >"$WATCH_PID"
    fi
    say "the lab is up: http://127.0.0.1:$HTTP_PORT/lab/ (replicas :$REPLICA_PORT_BASE..$((REPLICA_PORT_BASE + 2))); make lab-down stops it"
}

cmd_down() {
    local pid
    if pid=$(watcher_pid); then
        rm -f "$WATCH_PID"
        kill "$pid" 2>/dev/null || true
    fi
    rm -f "$WATCH_PID"
    [ -d "$RUN_DIR" ] || return 0
    "$STACK" down
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status)
    "$STACK" status
    if pid=$(watcher_pid); then say "watcher: pid $pid"; else say "watcher: not running"; fi
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
