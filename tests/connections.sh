# tests/connections.sh - a thousand clients held through nginx (sourced by tests/run-all.sh;
# bash).
#
# run_connections BUILD_DIR starts a stack of its own (scripts/stack.sh: PostgreSQL, Redis,
# three replicas of BUILD_DIR/stockd, nginx; no Redlock, etcd nor ZooKeeper) on free ports and
# a run directory of its own, then holds CONN_CLIENTS (1024) client connections to nginx for
# CONN_SECONDS (3) with wrk, every connection selling one unit at a time of a goods of
# CONN_STOCK (2000) units in redis-batch, and checks:
#   - wrk opened every connection and lost none: no connect, read, write or timeout error;
#   - every answer is a sale (200), a sold-out (409) or a 503 the API names (nothing else:
#     no 502 nor 504 from nginx), and nginx's log never says it took a replica out
#     ("temporarily disabled", "no live upstreams") or ran out of connections;
#   - the books are exact once settled: nothing oversold, and the orders cover every 200 the
#     clients were told of (a request cut by wrk's end may have sold unseen: at most one per
#     connection);
#   - each replica exits 0 on SIGTERM with no sanitizer report.
# It needs more open files than the other lanes' 1024 (wrk 1024, nginx twice that): it runs
# in a lane of its own (tests/run-all.sh) with CONN_FD_LIMIT (8192); where the hard limit is
# lower than 4096 it is skipped, and says why. About 15 s on 2 cores, most of it the stack's
# start and stop.

CONN_CLIENTS=${CONN_CLIENTS:-1024}
CONN_SECONDS=${CONN_SECONDS:-3}
CONN_STOCK=${CONN_STOCK:-2000}
CONN_GOODS=4701
CONN_FD_LIMIT=${CONN_FD_LIMIT:-8192}
CONN__ENV=()

run_connections() {
    local build=$1 dir log out line
    local -a ports
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    if [ "$(ulimit -n)" != unlimited ] && (($(ulimit -n) < 4096)); then
        echo
        echo "== connections: SKIP: the open-file limit here is $(ulimit -n), under the 4096 that $CONN_CLIENTS clients through nginx need"
        HARNESS_SKIPPED=$((${HARNESS_SKIPPED:-0} + 1))
        harness__record connections 0 0 "SKIP: open-file limit $(ulimit -n)"
        return 0
    fi
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-conn.XXXXXX")
    chmod 755 "$dir" # the postgres user must reach its data directory
    log=$HARNESS_LOG_DIR/connections.log
    out=$HARNESS_LOG_DIR/connections-wrk.out
    mapfile -t ports < <(pick_free_ports 3)
    CONN__ENV=(RUN_DIR="$dir" HTTP_PORT="${ports[0]}" PG_PORT="${ports[1]}" REDIS_PORT="${ports[2]}"
        REPLICA_PORT_BASE="$(pick_port_block 3)" REPLICAS=3 STOCKD="$build/stockd"
        REDLOCK_SERVERS=0 WITH_ETCD=0 WITH_ZOOKEEPER=0 HA=0 CLUSTER=0 MODE=redis-batch
        ADMIN_TOKEN=)
    harness_on_exit conn__down

    check_group_begin "connections"
    echo "($CONN_CLIENTS clients for ${CONN_SECONDS}s through nginx :${ports[0]}; log $log)"
    if ! env "${CONN__ENV[@]}" timeout --kill-after=10 180 scripts/stack.sh up >"$log" 2>&1; then
        tail -20 "$log" >&2
        check "the stack started" false
        check_group_end
        conn__down
        return 0
    fi
    check "goods $CONN_GOODS reset to $CONN_STOCK" conn__reset "${ports[0]}"
    wrk -t2 -c"$CONN_CLIENTS" -d"${CONN_SECONDS}s" --timeout 10s -s loadtest/deduct.lua \
        "http://127.0.0.1:${ports[0]}/api/deduct" -- mode=redis-batch goods=$CONN_GOODS \
        >"$out" 2>&1 || true
    line=$(grep -m1 '^RESULT ' "$out" || true)
    echo "    $line"
    check "wrk held $CONN_CLIENTS connections with no socket error" conn__no_socket_error "$line"
    check "every answer a 200, a 409 or the API's 503: no 502, no 504" conn__only_api_answers "$line"
    check "nginx took no replica out and had connections enough" \
        conn__nginx_log_clean "$dir/nginx/logs/error.log"
    check "the books are exact: nothing oversold, every 200 an order" \
        conn__books_exact "${ports[0]}" "$line"
    env "${CONN__ENV[@]}" scripts/stack.sh down >>"$log" 2>&1 || true
    for n in 1 2 3; do
        check "svc-$n stopped with status 0" ladder__exit_zero "$dir" "$n"
        check "svc-$n logs hold no sanitizer report" it__no_sanitizer_report "$dir/logs/svc-$n.log"
    done
    check_group_end
    cp "$dir/nginx/logs/error.log" "$HARNESS_LOG_DIR/connections-nginx-error.log" 2>/dev/null || true
    rm -rf "$dir"
    CONN__ENV=()
}

# A RESULT line's value of key (loadtest/deduct.lua's summary).
conn__field() {
    local key=$2
    sed -n "s/.* $key=\([0-9.]*\).*/\1/p" <<<" $1"
}

conn__reset() {
    curl -sS -f -m 10 -o /dev/null -X POST -H 'Content-Type: application/json' \
        -d "{\"goods_id\":$CONN_GOODS,\"stock\":$CONN_STOCK}" "http://127.0.0.1:$1/api/admin/reset"
}

conn__no_socket_error() {
    local k
    [ -n "$1" ] || { echo "    wrk printed no RESULT line" >&2; return 1; }
    for k in errors_connect errors_read errors_write errors_timeout; do
        [ "$(conn__field "$1" $k)" = 0 ] || { echo "    $k=$(conn__field "$1" $k)" >&2; return 1; }
    done
}

conn__only_api_answers() {
    [ -n "$1" ] && [ "$(conn__field "$1" other)" = 0 ] &&
        (($(conn__field "$1" requests) > 0)) ||
        { echo "    other=$(conn__field "$1" other) requests=$(conn__field "$1" requests)" >&2; return 1; }
}

conn__nginx_log_clean() {
    local pattern='temporarily disabled|no live upstreams|worker_connections are not enough|Too many open files'
    [ "$(grep -cE "$pattern" "$1" || true)" = 0 ] || { grep -m5 -E "$pattern" "$1" >&2; return 1; }
}

# Settled (the same twice, a second apart): oversold 0, stock + sold = the initial stock, and
# sold at least the 200s seen and at most one more per connection.
conn__books_exact() {
    local port=$1 line=$2 prev="" now ok200 sold stock oversold i
    for ((i = 0; i < 15; i++)); do
        now=$(curl -sS -m 5 "http://127.0.0.1:$port/api/stock/$CONN_GOODS")
        [ "$now" = "$prev" ] && break
        prev=$now
        sleep 1
    done
    echo "    $now" >&2
    ok200=$(conn__field "$line" s200)
    sold=$(sed -n 's/.*"sold":\([0-9]*\).*/\1/p' <<<"$now")
    stock=$(sed -n 's/.*"stock":\([0-9]*\).*/\1/p' <<<"$now")
    oversold=$(sed -n 's/.*"oversold":\([0-9-]*\).*/\1/p' <<<"$now")
    [ -n "$sold" ] && [ -n "$ok200" ] && [ "$oversold" = 0 ] &&
        ((stock + sold == CONN_STOCK && sold >= ok200 && sold <= ok200 + CONN_CLIENTS))
}

conn__down() {
    [ ${#CONN__ENV[@]} -gt 0 ] || return 0
    env "${CONN__ENV[@]}" scripts/stack.sh down >/dev/null 2>&1 || true
}
