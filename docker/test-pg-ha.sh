#!/usr/bin/env bash
# docker/test-pg-ha.sh - `make test-docker-pg-ha`: proves that the compose profile `pg-ha`
# (PostgreSQL under Patroni, docker/compose.yml) starts, serves and fails over, on a Docker
# engine or, where there is none, on podman (docker/podman.sh), as docker/test.sh does for
# the plain stack. Separate from docker/test.sh: it adds minutes (a cluster bootstraps, a
# failover waits out Patroni's ttl, the killed node rejoins), not the seconds that stage
# may grow by.
#
# What it checks, in order, each step timed:
#   1. an engine (the same choice as docker/test.sh; none -> "SKIP docker-pg-ha: <reason>");
#   2. the images build (the patroni and etcd targets, and the plain stack's);
#   3. `--profile pg-ha up -d pgha-etcd pg-1 pg-2 pg-3`: `patronictl list` shows one Leader
#      and two replicas with a known lag (Patroni 3.0 says "running" for a replica that
#      streams; the leader's pg_stat_replication then shows both);
#   4. the rest of the stack, told to use the three nodes (PG_HOSTS=pg-1,pg-2,pg-3,
#      PG_TARGET=read-write: libpq finds the primary); nginx answers /readyz;
#   5. sales through nginx (redis mode) land in `orders` on the leader;
#   6. the leader's container killed (SIGKILL): `patronictl list` on a survivor shows a new
#      Leader, the service sells again (the time to the first 200 is printed), and every 200
#      of the test is an order on the new leader;
#   7. the killed node started again rejoins as a replica (pg_rewind) and streams;
#   8. teardown: `down -v`, and the podman engine stopped if this script started it (also
#      when a step fails).
#
# Settings (environment): DOCKER_PGHA_HTTP_PORT (18090) where nginx is published on
# 127.0.0.1; DOCKER_PGHA_PROJECT (stockpgha) the compose project; DOCKER_PGHA_REPLICATION
# (async; sync or strict) Patroni's replication mode; DOCKER_TEST=0 skips;
# DOCKER_TEST_REQUIRED=1 turns a SKIP into a failure; DOCKER_TEST_KEEP=1 leaves the stack up
# after a success. Logs: .run/docker-test-pg-ha/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMPOSE_FILE=$ROOT/docker/compose.yml
PROJECT=${DOCKER_PGHA_PROJECT:-stockpgha}
TEST_PORT=${DOCKER_PGHA_HTTP_PORT:-18090}
REPLICATION=${DOCKER_PGHA_REPLICATION:-async}
LOG_DIR=$ROOT/.run/docker-test-pg-ha
BASE=http://127.0.0.1:$TEST_PORT
PATRONI_CONF=/var/lib/postgresql/patroni.yml
GOODS=2
T0=$SECONDS

ME=docker/test-pg-ha.sh
SKIP_NAME=docker-pg-ha
PROFILES=(--profile pg-ha) # every compose command names it: the Patroni services are in it
DOWN_ALSO=()

# The steps and messages, the engine, the environment and the teardown, as docker/test.sh
# has them.
# shellcheck source=docker/lib.sh
source "$ROOT/docker/lib.sh"

# docker/.env's variables from that file only (lib.sh), and the PostgreSQL ones ours.
clean_pgha_environment() {
    clean_environment
    unset PG_HOSTS PG_PORTS PG_TARGET PG_REPLICATION
    export PG_REPLICATION=$REPLICATION
}

# HTTP through nginx: prints "STATUS BODY" on one line.
http() {
    local method=$1 path=$2 out
    shift 2
    out=$(curl -sS -m 20 -X "$method" -w '\n%{http_code}' "$@" "$BASE$path" 2>&1) ||
        { echo "000 curl-error: ${out//$'\n'/ }"; return 0; }
    echo "${out##*$'\n'} ${out%$'\n'*}"
}
deduct() {
    http POST /api/deduct -H 'Content-Type: application/json' \
        -d "{\"goods_id\":$GOODS,\"count\":1,\"mode\":\"redis\"}"
}
json_field() {
    sed -n 's/.*"'"$2"'":"\{0,1\}\([^",}]*\).*/\1/p' <<<"$1" | head -n 1
}

# COMMAND... run in the container of service SERVICE (as the image's user). Through the
# engine's own exec: docker-compose 1.29's exec on podman's API returns nothing.
in_service() {
    local id
    id=$(compose ps -q "$1" 2>/dev/null | head -n 1)
    [ -n "$id" ] || return 1
    shift
    timeout 20 "$ENGINE" exec "$id" "$@"
}
# patronictl list, asked of node N (pg-N): its table, or nothing when N does not answer.
patroni_list() {
    in_service "pg-$1" patronictl -c "$PATRONI_CONF" list 2>/dev/null | tr -d '\r' || true
}
# From a patronictl table on stdin: "LEADER REPLICAS" (the leader's name, or "-", and how
# many members are replicas following it with a lag it knows: Replica or Sync Standby,
# state running, or streaming as later Patroni versions say, and a Lag in MB).
patroni_roles() {
    awk -F'|' 'NF > 6 {
                   m = $2; r = $4; s = $5; l = $7
                   gsub(/^ +| +$/, "", m); gsub(/^ +| +$/, "", r); gsub(/^ +| +$/, "", s); gsub(/^ +| +$/, "", l)
                   if (r == "Leader" && s == "running") leader = m
                   else if ((r == "Replica" || r == "Sync Standby") && (s == "running" || s == "streaming") && l ~ /^[0-9]+$/) n++
               }
               END { print (leader == "" ? "-" : leader), n + 0 }'
}
# wait_roles NODES SECONDS WANT_REPLICAS [NOT_LEADER]: asks each of NODES (numbers) in turn
# until one shows a running Leader (other than NOT_LEADER) and WANT_REPLICAS replicas
# streaming. Sets LIST (the last table) and LEADER; false on timeout.
LIST="" LEADER=""
wait_roles() {
    local nodes=$1 deadline=$((SECONDS + $2)) want=$3 not=${4:-} n roles
    while [ $SECONDS -lt $deadline ]; do
        for n in $nodes; do
            LIST=$(patroni_list "$n")
            [ -n "$LIST" ] || continue
            roles=$(patroni_roles <<<"$LIST")
            LEADER=${roles% *}
            if [ "$LEADER" != - ] && [ "$LEADER" != "$not" ] && [ "${roles#* }" = "$want" ]; then
                return 0
            fi
        done
        sleep 1
    done
    return 1
}
# SQL on node LEADER's PostgreSQL as postgres, over its local socket.
leader_sql() {
    in_service "$LEADER" psql -X -q -At -d stock -c "$1" | tr -d '\r'
}

SOLD=0 # the sales of the test that answered 200
# sell N WHAT: N sales through nginx, each of which must answer 200 (else fail, naming the
# sale "WHAT i"); SOLD counts them.
sell() {
    local i r
    for ((i = 0; i < $1; i++)); do
        r=$(deduct)
        [ "${r%% *}" = 200 ] || fail "$2 $i answered: $r"
        SOLD=$((SOLD + 1))
    done
}
# orders_match SAID WHO: the orders of goods GOODS on the leader are the SOLD sales, one
# each; info prints "SAID: <the count>", and a failure names the leader as WHO.
orders_match() {
    local r
    r=$(leader_sql "SELECT count(*) FROM orders WHERE goods = $GOODS")
    info "$1: $r"
    [ "$r" = "$SOLD" ] || fail "$2 holds $r orders of goods $GOODS, not $SOLD"
}

main() {
    [ "${DOCKER_TEST:-1}" != 0 ] || skip "disabled by DOCKER_TEST=0"
    mkdir -p "$LOG_DIR"
    exec 9>"$LOG_DIR/lock"
    flock -n 9 || fail "another docker/test-pg-ha.sh runs (lock $LOG_DIR/lock)"
    trap on_exit EXIT
    trap 'exit 130' INT TERM

    choose_engine
    step "1. engine: $ENGINE"
    STEP_T=$T0
    clean_pgha_environment
    if (exec 3<>"/dev/tcp/127.0.0.1/$TEST_PORT") 2>/dev/null; then
        fail "127.0.0.1:$TEST_PORT is taken; set DOCKER_PGHA_HTTP_PORT to a free port"
    fi

    step "2. build the images (log: $LOG_DIR/build.log)"
    # pg-2 and pg-3 use the image pg-1 builds; svc-1..3 and seed the one migrate builds.
    compose build pgha-etcd pg-1 postgres redis migrate nginx >"$LOG_DIR/build.log" 2>&1 ||
        { tail -n 30 "$LOG_DIR/build.log" >&2; fail "the images did not build"; }

    step "3. Patroni: pgha-etcd and pg-1..3 up ($REPLICATION replication); one Leader, two replicas"
    compose down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
    STACK_CREATED=1
    timeout 300 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" --profile pg-ha \
        up -d pgha-etcd pg-1 pg-2 pg-3 >"$LOG_DIR/up-pgha.log" 2>&1 ||
        { cat "$LOG_DIR/up-pgha.log" >&2; fail "compose up of the Patroni nodes failed"; }
    wait_roles "1 2 3" 240 2 || { echo "$LIST" >&2; fail "no Leader with two replicas streaming after 240 s"; }
    echo "$LIST" | sed 's/^/    /'
    local first_leader=$LEADER r i
    for ((i = 0; i < 30; i++)); do
        r=$(leader_sql "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" || true)
        [ "$r" != 2 ] || break
        sleep 1
    done
    [ "$r" = 2 ] || fail "the leader's pg_stat_replication shows $r standbys streaming, not 2"
    info "$LEADER's pg_stat_replication: 2 standbys streaming"

    step "4. the stack on the three nodes (PG_HOSTS=pg-1,pg-2,pg-3, target_session_attrs=read-write)"
    PG_HOSTS=pg-1,pg-2,pg-3 PG_PORTS=5432,5432,5432 PG_TARGET=read-write \
        timeout 300 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" --profile pg-ha up -d \
        >"$LOG_DIR/up.log" 2>&1 || { cat "$LOG_DIR/up.log" >&2; fail "compose up failed"; }
    wait_ready 120 || fail "nginx on $BASE never answered /readyz with 200"
    info "ready: $(http GET /readyz)"

    step "5. sales through nginx land on the leader ($LEADER)"
    r=$(http POST /api/admin/reset -H 'Content-Type: application/json' \
        -H "Authorization: Bearer $ADMIN_TOKEN" -d "{\"goods_id\":$GOODS,\"stock\":1000}")
    [ "${r%% *}" = 200 ] || fail "reset of goods $GOODS answered: $r"
    sell 20 sale
    orders_match "$SOLD sales answered 200; orders of goods $GOODS on $LEADER" "the leader"

    step "6. the leader's container ($LEADER) killed: a new leader, and sales again"
    local t_kill survivors n first_ms=""
    compose kill -s SIGKILL "$LEADER" >"$LOG_DIR/kill.log" 2>&1 || fail "compose kill $LEADER failed"
    t_kill=$(date +%s%3N)
    survivors=$(for n in 1 2 3; do [ "pg-$n" = "$first_leader" ] || echo "$n"; done | tr '\n' ' ')
    # Sell until a 200 comes (the service finds the new primary itself), at most 90 s.
    while [ $(($(date +%s%3N) - t_kill)) -lt 90000 ]; do
        r=$(deduct)
        if [ "${r%% *}" = 200 ]; then
            SOLD=$((SOLD + 1))
            first_ms=$(($(date +%s%3N) - t_kill))
            break
        fi
        sleep 0.5
    done
    [ -n "$first_ms" ] || fail "no sale answered 200 within 90 s of the kill (last: $r)"
    info "first 200 after the kill: $first_ms ms"
    wait_roles "$survivors" 60 1 "$first_leader" ||
        { echo "$LIST" >&2; fail "no new Leader with one replica streaming among pg-${survivors// /, pg-}"; }
    echo "$LIST" | sed 's/^/    /'
    sell 10 "sale after the failover"
    orders_match "new leader $LEADER; $SOLD sales answered 200 in all; orders of goods $GOODS there" \
        "the new leader"

    step "7. $first_leader started again: it rejoins as a replica"
    compose start "$first_leader" >"$LOG_DIR/restart.log" 2>&1 || fail "compose start $first_leader failed"
    wait_roles "$survivors" 120 2 "$first_leader" ||
        { echo "$LIST" >&2; fail "$first_leader did not rejoin as a streaming replica within 120 s"; }
    echo "$LIST" | sed 's/^/    /'
}

main "$@"
