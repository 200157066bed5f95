#!/usr/bin/env bash
# stack.sh - the native local stack: PostgreSQL, Redis, the replicas and nginx, under a
# run directory of the project.
#
#   scripts/stack.sh up            start whatever is not running, migrate, seed; idempotent
#   scripts/stack.sh down          stop what `up` started, by PID; keeps the database files
#   scripts/stack.sh status        what runs, with PIDs and ports
#   scripts/stack.sh logs [NAME]   the last LOG_LINES (50) lines of each log, or of NAME
#                                  (svc-1, postgres, redis, redlock-1, nginx, access, migrate)
#   scripts/stack.sh redis-stop    stop Redis only (the tests' "dependency down" cases)
#   scripts/stack.sh redis-start   start it again
#   scripts/stack.sh redis-freeze  SIGSTOP Redis: a server that hangs
#   scripts/stack.sh redis-thaw    SIGCONT it
#   scripts/stack.sh redlock-stop N...   stop Redlock nodes N... (by PID; the ladder's
#                                  minority-down scenario)
#   scripts/stack.sh redlock-start N...  start them again (empty; with REDLOCK_APPENDFSYNC=always,
#                                  keeping every write in an append-only file, fsync'd before
#                                  each answer, and reading back the one left by the last run)
#   scripts/stack.sh redlock-kill N...   kill Redlock nodes N... (SIGKILL by PID: a crash;
#                                  the ladder's amnesia rows)
#   scripts/stack.sh redlock-restart N...  kill them and start them again at once (one
#                                  command: the ladder's amnesia rows race a lease)
#   scripts/stack.sh etcd-stop     stop etcd only
#   scripts/stack.sh etcd-start    start etcd (also without WITH_ETCD)
#   scripts/stack.sh zookeeper-stop   stop ZooKeeper only
#   scripts/stack.sh zookeeper-start  start ZooKeeper (also without WITH_ZOOKEEPER)
#   scripts/stack.sh pg-stop       stop PostgreSQL only (fast shutdown: clients are cut off)
#   scripts/stack.sh pg-start      start it again (the replicas reconnect by themselves)
#   scripts/stack.sh pg-freeze     SIGSTOP PostgreSQL and its backends: a server that hangs
#   scripts/stack.sh pg-thaw       SIGCONT them
#   scripts/stack.sh replica-stop N...   stop replicas N... (SIGTERM; 1 if one exits non-zero)
#   scripts/stack.sh replica-start N...  start them again and wait until they are ready
#   scripts/stack.sh replica-start-extra N PORT
#                                  start an extra replica svc-N (N above REPLICAS) on PORT,
#                                  not behind nginx, with this command's environment, e.g.
#                                  BUSINESS_DELAY_MS=1500 scripts/stack.sh \
#                                      replica-start-extra 4 18090
#                                  (replica-stop N and `down` stop it too)
#   scripts/stack.sh nginx-test    render the nginx configuration and run nginx -t on it
#   HA=1 scripts/stack.sh up       the same, plus a Redis replica and three Sentinels; the
#                                  replicas are given REDIS_SENTINELS and REDIS_MASTER_NAME
#   scripts/stack.sh ha-status     the replica's and the Sentinels' PIDs and ports
#   PG_HA=1 scripts/stack.sh up    three PostgreSQL nodes under Patroni (scripts/lib/patroni.sh)
#                                  in place of the single PostgreSQL; the replicas reach the
#                                  primary through a multi-host DATABASE_URL
#                                  (target_session_attrs=read-write). PG_REPLICATION=async,
#                                  sync or strict says how commits are replicated [async]
#   scripts/stack.sh pg-ha-list    patronictl list: each node's role, state, timeline, lag
#   scripts/stack.sh pg-ha-leader  the number of the node that is the primary now
#   scripts/stack.sh pg-ha-sql SQL run SQL on the primary (database stock, as the superuser)
#   scripts/stack.sh pg-ha-kill [N|leader]  SIGKILL node N (Patroni, postmaster, backends) as
#                                  a dead host; prints its number
#   scripts/stack.sh pg-ha-start N start node N's Patroni again (it rejoins as a standby)
#   CLUSTER=1 scripts/stack.sh up  a Redis Cluster of three masters in place of the single
#                                  Redis; the replicas are given REDIS_CLUSTER_NODES, and their
#                                  redis lock names carry a hash tag (lock:goods:{N})
#
# Settings (environment; defaults in brackets). Change RUN_DIR and the ports to run a
# second stack beside a running one.
#   RUN_DIR            where everything lives [<project>/.run]
#   HTTP_PORT          nginx [8080]
#   REPLICA_PORT_BASE  replica N listens on REPLICA_PORT_BASE+N-1 [8081]
#   REPLICAS           how many replicas, named svc-1..svc-N [3]
#   PG_PORT            PostgreSQL [15432]
#   REDIS_PORT         Redis [16379] (with HA=1: where the master starts)
#   HA                 1: add the Redis replica and the Sentinels [0]
#   REDIS_REPLICA_PORT the Redis replica [16380]
#   SENTINEL_PORT_BASE Sentinel N listens on SENTINEL_PORT_BASE+N-1, N = 1..3 [26379]
#   REDIS_MASTER_NAME  the name the Sentinels know the master by [stock]
#   CLUSTER            1: a Redis Cluster instead of the single Redis (not with HA=1); unset:
#                      as the last `up` of this RUN_DIR left it, until `down` [0]
#   CLUSTER_PORT_BASE  cluster node N listens on CLUSTER_PORT_BASE+N-1 [REDIS_PORT+100]
#   CLUSTER_BUS_PORT_BASE  and talks to the others on CLUSTER_BUS_PORT_BASE+N-1 [REDIS_PORT+110]
#   REDLOCK_SERVERS    independent Redis servers for the redlock mode, 0 to 9 [5]; 0: the
#                      replicas do not serve it
#   REDLOCK_PORT_BASE  Redlock node N listens on REDLOCK_PORT_BASE+N-1 [REDIS_PORT+11]
#   REDIS_VIA          N:PORT,...: replica N reaches Redis at PORT (a relay in front of it)
#                      instead of REDIS_PORT [unset]
#   REDLOCK_VIA        N:PORT,...: the replicas reach Redlock node N at PORT (a relay in front
#                      of it) instead of its own port; R/N:PORT: replica R alone [unset]
#   REDLOCK_CLOCK_SHIFT  N:FILE: Redlock node N's wall clock is moved by the milliseconds in
#                      FILE, read again at every call, so that rewriting FILE jumps that
#                      server's clock (build/libclock-shift.so; CLOCK_SHIFT_LIB: another) [unset]
#   REDLOCK_APPENDFSYNC  always: redlock-start (and up) starts the nodes with appendonly yes and
#                      appendfsync always; unset: empty, nothing on disk [unset]
#   WITH_ETCD          1: `up` starts etcd too, and the replicas offer the etcd mode; unset:
#                      as the last `up` of this RUN_DIR left it, until `down` [0]
#   ETCD_PORT, ETCD_PEER_PORT  etcd's client and peer ports [12379, 12380]
#   PG_HA              1: PostgreSQL under Patroni (above); unset: as the last `up` left it [0]
#   PG_REPLICATION     async, sync or strict (with PG_HA=1) [async]
#   PGHA_PORT_BASE     PostgreSQL node N listens on PGHA_PORT_BASE+N-1 [PG_PORT]
#   PGHA_API_PORT_BASE its Patroni's REST API on PGHA_API_PORT_BASE+N-1 [PG_PORT+10]
#   PGHA_ETCD_PORT, PGHA_ETCD_PEER_PORT  Patroni's own etcd [PG_PORT+20, PG_PORT+21]
#   PGHA_TTL, PGHA_LOOP_WAIT, PGHA_RETRY_TIMEOUT  Patroni's timings, seconds [8, 1, 3]
#   WITH_ZOOKEEPER     1: `up` starts ZooKeeper too (a JVM), and the replicas offer the
#                      zookeeper mode; unset: as the last `up` of this RUN_DIR left it [0]
#   ZK_PORT            ZooKeeper's client port [12181]
#   STOCKD             the service binary [<project>/build/stockd]
#   MODE               the replicas' default mode [redis]
#   SEED_GOODS, SEED_STOCK  goods created by the first `up` [1, 5000]
#   READY_TIMEOUT      seconds to wait for each replica's /readyz [60]
#   LOG_LINES          lines shown by `logs` [50]
# The service's other variables pass through to the replicas unchanged: LOCK_WAIT_MS,
# LOCK_LEASE_MS, LOCK_MAX_HOLD_MS, ADMIN_TOKEN, BUSINESS_DELAY_MS, WORKER_THREADS, MAX_CONNECTIONS, DB_POOL_SIZE,
# REDIS_POOL_SIZE, DB_WAIT_MS, DB_REPLY_TIMEOUT_MS, REDIS_TIMEOUT_MS, CONNECTION_TIMEOUT_S,
# OPTIMISTIC_RETRIES, LOCKROW_TTL_MS, LOG_LEVEL (see `stockd --help`). DATABASE_URL,
# REDIS_HOST/PORT, REDLOCK_NODES, PORT, INSTANCE and MIGRATIONS_DIR are set here. A replica
# keeps the settings it was started with: `down` then `up` to change them
# (`up` does restart a replica whose STOCKD binary was rebuilt since it started).
#
# Layout of RUN_DIR: pg/ (data, socket, postgres log), redis/, replicas/ (PID, exit and port
# files), nginx/ (prefix: conf, logs, tmp), logs/ (svc-N.log, redis.log, migrate.log).
set -euo pipefail

export LOG_PREFIX=stack
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"
source "$here/lib/config.sh"
source "$here/lib/ports.sh"
source "$here/lib/pg.sh"
source "$here/lib/patroni.sh"
source "$here/lib/redis.sh"
source "$here/lib/redlock.sh"
source "$here/lib/etcd.sh"
source "$here/lib/zookeeper.sh"
source "$here/lib/sentinel.sh"
source "$here/lib/cluster.sh"
source "$here/lib/replicas.sh"
source "$here/lib/nginx.sh"

# One stack.sh at a time per run directory: two `up`s racing would start everything twice.
# The script re-runs itself under `flock -o`, which holds the lock in its own process and
# closes the descriptor before running us: a lock descriptor open in this shell would be
# inherited by every server started here, and held for as long as they run.
stack__lock() {
    local cmd=$1
    shift
    local rc=0
    [ "${STACK_LOCKED:-}" = "$RUN_DIR" ] && return 0
    STACK_LOCKED=$RUN_DIR flock -o -w 300 -E 75 "$RUN_DIR/.stack.lock" "$0" "$cmd" "$@" || rc=$?
    [ $rc -ne 75 ] || log "error: another stack.sh kept $RUN_DIR/.stack.lock for 300 s"
    exit $rc
}

# curl through nginx; prints the HTTP status, the body goes to the file $2.
stack__http() {
    local method=$1 out=$2 path=$3
    shift 3
    curl -sS -m 10 -o "$out" -w '%{http_code}' -X "$method" "$@" \
        "http://127.0.0.1:$HTTP_PORT$path" 2>/dev/null || echo 000
}

# Seeds goods SEED_GOODS with SEED_STOCK units, unless the goods exist already (so `up` on a
# running stack, or after `down`, keeps the figures of the last run).
stack__seed() {
    local body status
    local -a auth=()
    body=$(mktemp)
    status=$(stack__http GET "$body" "/api/stock/$SEED_GOODS")
    case $status in
    200) ;;
    404)
        [ -n "${ADMIN_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $ADMIN_TOKEN")
        status=$(stack__http POST "$body" /api/admin/reset "${auth[@]}" \
            -H 'Content-Type: application/json' \
            --data "{\"goods_id\":$SEED_GOODS,\"stock\":$SEED_STOCK}")
        if [ "$status" != 200 ]; then
            log "reset answered $status: $(cat "$body")"
            rm -f "$body"
            die "cannot seed goods $SEED_GOODS"
        fi
        log "seeded goods $SEED_GOODS with $SEED_STOCK units"
        ;;
    *)
        log "GET /api/stock/$SEED_GOODS answered $status: $(cat "$body" 2>/dev/null)"
        rm -f "$body"
        die "the stack does not answer through nginx"
        ;;
    esac
    rm -f "$body"
}

cmd_up() {
    local n
    [ -x "$STOCKD" ] || die "$STOCKD not found: build it first (make)"
    if [ "$PG_HA" = 1 ]; then
        : >"$RUN_DIR/with-pg-ha"
        pgha_start
    else
        rm -f "$RUN_DIR/with-pg-ha"
        pg_start
    fi
    if [ "$CLUSTER" = 1 ]; then
        : >"$RUN_DIR/with-cluster"
        cluster_start
    else
        rm -f "$RUN_DIR/with-cluster"
        redis_start
    fi
    for ((n = 1; n <= REDLOCK_SERVERS; n++)); do
        redlock_start "$n"
    done
    if [ "$WITH_ETCD" = 1 ]; then
        : >"$RUN_DIR/with-etcd"
        etcd_start
    else
        rm -f "$RUN_DIR/with-etcd"
    fi
    if [ "$WITH_ZOOKEEPER" = 1 ]; then
        : >"$RUN_DIR/with-zookeeper"
        zookeeper_start
    else
        rm -f "$RUN_DIR/with-zookeeper"
    fi
    if [ "$HA" = 1 ]; then ha_start; fi
    replicas_migrate
    for ((n = 1; n <= REPLICAS; n++)); do
        replica_start "$n"
    done
    # nginx only once every replica is ready: open-source nginx cannot probe /readyz itself.
    for ((n = 1; n <= REPLICAS; n++)); do
        replica_wait_ready "$n"
    done
    nginx_start
    stack__seed
    cat <<EOF

The stock service is up: http://127.0.0.1:$HTTP_PORT  ($REPLICAS replicas, default mode $MODE)
  curl -s http://127.0.0.1:$HTTP_PORT/api/stock/$SEED_GOODS
  curl -s -X POST -H 'Content-Type: application/json' \\
       -d '{"goods_id":$SEED_GOODS,"count":1}' http://127.0.0.1:$HTTP_PORT/api/deduct
Logs: scripts/stack.sh logs (files in $LOG_DIR); stop with: make down
EOF
}

# Stops in the reverse order of `up`: nginx first (no new requests), then the replicas
# (they finish what is in flight and release their locks), then Redis and PostgreSQL.
cmd_down() {
    local failed=0 n
    nginx_stop || failed=1
    # shellcheck disable=SC2046 # numbers, one per line
    replicas_stop $(replicas_known) || failed=1
    # The Sentinels and the replica are stopped whether HA is set now or not: `down` stops
    # what `up` started.
    ha_stop || failed=1
    redis_stop || failed=1
    cluster_stop || failed=1
    rm -f "$RUN_DIR/with-cluster"
    for n in $(redlock_known); do
        redlock_stop "$n" || failed=1
    done
    etcd_stop || failed=1
    rm -f "$RUN_DIR/with-etcd"
    zookeeper_stop || failed=1
    rm -f "$RUN_DIR/with-zookeeper"
    pg_stop || failed=1
    pgha_stop || failed=1
    rm -f "$RUN_DIR/with-pg-ha"
    if [ $failed -ne 0 ]; then
        log "stopped, with the problems above"
        return 1
    fi
    log "stopped (database kept in $PG_DIR/data)"
}

cmd_status() {
    local n
    if [ "$PG_HA" = 1 ]; then pgha_status; else pg_status; fi
    redis_status
    redlock_status
    etcd_status
    zookeeper_status
    if [ "$HA" = 1 ]; then ha_status; fi
    if [ "$CLUSTER" = 1 ]; then cluster_status; fi
    for ((n = 1; n <= REPLICAS; n++)); do
        replica_status "$n"
    done
    # Extra replicas (replica-start-extra) that this run directory knows of.
    for n in $(replicas_known | sort -n); do
        if ((n > REPLICAS)); then replica_status "$n"; fi
    done
    nginx_status
}

cmd_logs() {
    local lines=${LOG_LINES:-50} f name=${1:-}
    local -a files=()
    case $name in
    '') files=("$PG_DIR/log/postgres.log" "$LOG_DIR/redis.log" "$LOG_DIR/migrate.log"
        "$LOG_DIR"/svc-*.log "$NGINX_DIR/logs/error.log") ;;
    postgres) files=("$PG_DIR/log/postgres.log") ;;
    redis | etcd | zookeeper | migrate | svc-* | redlock-*) files=("$LOG_DIR/$name.log") ;;
    nginx) files=("$NGINX_DIR/logs/error.log") ;;
    access) files=("$NGINX_DIR/logs/access.log") ;;
    *) die "logs: unknown log '$name' (svc-N, postgres, redis, redlock-N, nginx, access, migrate)" ;;
    esac
    for f in "${files[@]}"; do
        [ -r "$f" ] || continue
        echo "==> $f <=="
        tail -n "$lines" "$f"
    done
}

# Replica numbers given on the command line, checked: 1 to REPLICAS, or (with `extra` as the
# first argument, for replica-stop) an extra replica this run directory has started.
stack__replica_args() {
    local n extra=0
    if [ "${1:-}" = extra ]; then
        extra=1
        shift
    fi
    [ $# -gt 0 ] || die "name the replicas by number, e.g. 'replica-stop 2'"
    for n in "$@"; do
        if [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= REPLICAS)); then
            continue
        fi
        if ((extra)) && [[ $n =~ ^[0-9]+$ ]] && [ -e "$REPLICA_DIR/svc-$n.pid" ]; then
            continue
        fi
        die "no replica '$n' (1 to $REPLICAS$( ((extra)) && echo ", or an extra one started here"))"
    done
}

# replica-start-extra N PORT: svc-N on PORT, outside nginx's upstream (nginx lists 1..REPLICAS
# only), with whatever service settings this command was given in its environment.
cmd_replica_start_extra() {
    local n=${1:-} port=${2:-}
    [ $# -eq 2 ] || die "usage: replica-start-extra N PORT"
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n <= REPLICAS || n > 99)); then
        die "an extra replica's number must be from $((REPLICAS + 1)) to 99, got '$n'"
    fi
    if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
        die "no port '$port'"
    fi
    [ -x "$STOCKD" ] || die "$STOCKD not found: build it first (make)"
    replica_start "$n" "$port"
    replica_wait_ready "$n"
}

main() {
    local cmd=${1:-} n
    [ $# -gt 0 ] && shift
    stack_config
    case $cmd in
    up | down | redis-stop | redis-start | redis-freeze | redis-thaw | redlock-stop | redlock-start | redlock-kill | redlock-restart | etcd-stop | etcd-start | \
        zookeeper-stop | zookeeper-start | \
        pg-stop | pg-start | pg-ha-kill | pg-ha-start | \
        pg-freeze | pg-thaw | replica-stop | replica-start | replica-start-extra)
        stack__lock "$cmd" "$@"
        ;;
    esac
    case $cmd in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    redis-stop) redis_stop ;;
    redis-start) redis_start ;;
    redis-freeze) redis_freeze ;;
    redis-thaw) redis_thaw ;;
    redlock-stop | redlock-start | redlock-kill | redlock-restart)
        [ $# -gt 0 ] || die "name the Redlock nodes by number, e.g. '$cmd 1 2'"
        for n in "$@"; do
            [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= REDLOCK_SERVERS)) ||
                die "no Redlock node '$n' (1 to $REDLOCK_SERVERS)"
        done
        for n in "$@"; do
            case $cmd in
            redlock-stop) redlock_stop "$n" ;;
            redlock-kill) redlock_kill "$n" ;;
            redlock-restart) redlock_kill "$n" && redlock_start "$n" ;;
            *) redlock_start "$n" ;;
            esac
        done
        ;;
    etcd-stop) etcd_stop ;;
    etcd-start) etcd_start ;;
    zookeeper-stop) zookeeper_stop ;;
    zookeeper-start) zookeeper_start ;;
    ha-status) ha_status ;;
    pg-stop) pg_stop ;;
    pg-start) pg_start ;;
    pg-freeze) pg_freeze ;;
    pg-thaw) pg_thaw ;;
    pg-ha-list) pgha_patronictl list ;;
    pg-ha-leader) pgha_leader ;;
    pg-ha-sql)
        [ $# -eq 1 ] || die "usage: pg-ha-sql 'SQL' (run on the primary, database stock)"
        pgha_psql stock -Atc "$1"
        ;;
    pg-ha-kill)
        n=${1:-leader}
        [ "$n" != leader ] || n=$(pgha_leader) || die "no primary to kill"
        [[ $n =~ ^[1-3]$ ]] || die "no node '$n' (1 to 3, or leader)"
        pgha_node_kill "$n"
        echo "$n"
        ;;
    pg-ha-start)
        [[ ${1:-} =~ ^[1-3]$ ]] || die "name the node by number, e.g. 'pg-ha-start 1'"
        pgha_node_start "$1"
        ;;
    replica-stop)
        stack__replica_args extra "$@"
        replicas_stop "$@"
        ;;
    replica-start)
        stack__replica_args "$@"
        for n in "$@"; do replica_start "$n"; done
        for n in "$@"; do replica_wait_ready "$n"; done
        ;;
    replica-start-extra) cmd_replica_start_extra "$@" ;;
    nginx-test)
        nginx_render
        nginx_test && log "nginx -t: the configuration in $NGINX_DIR/conf is valid"
        ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
        exit 2
        ;;
    esac
}

main "$@"
