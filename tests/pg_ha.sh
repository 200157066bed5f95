# tests/pg_ha.sh - the service on PostgreSQL under Patroni, through a failover (sourced by
# tests/run-all.sh; bash; needs harness.sh, ports.sh and integration.sh's it__no_sanitizer_report).
# shellcheck shell=bash
#
# run_pg_ha BUILD_DIR starts `PG_HA=1 scripts/stack.sh up` (three PostgreSQL nodes, Patroni's
# etcd, one replica of the service, nginx) on free ports in a directory of its own, then:
#   - patronictl list shows one leader and two replicas, streaming;
#   - GET /api/replica says the replication in force (async: Patroni's default);
#   - a sale through nginx answers 200 and its order is on the primary;
#   - the primary is killed -9 (Patroni, postmaster and backends: a dead host);
#   - the service answers 503 unavailable meanwhile (never 500), then, once a standby has taken
#     over, sells again, with no restart and no setting changed: libpq's multi-host string
#     finds the new primary; the order of that sale is on the new primary;
#   - `down` stops everything and the replica exits 0 with no sanitizer report.
# Patroni's demo timings (ttl 8 s, loop_wait 1 s) make the failover take about 10 s.
#
# Alone: tests/pg_ha.sh BUILD_DIR (e.g. build/san, after make B=build/san SAN=1 programs).

run_pg_ha() {
    local build=$1 dir log t0 body status first="" n=0 old new i saw500=0
    local -a ports env
    local http redis svc pg api etcd
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-pgha.XXXXXX")
    chmod 755 "$dir" # the postgres user must reach its data directories
    log=$HARNESS_LOG_DIR/pg_ha-stack.log
    body=$dir/body
    mapfile -t ports < <(pick_free_ports 2)
    http=${ports[0]} redis=${ports[1]}
    svc=$(pick_port_block 1)
    pg=$(pick_port_block 3)
    api=$(pick_port_block 3)
    etcd=$(pick_port_block 2)
    env=(RUN_DIR="$dir" PG_HA=1 PG_REPLICATION=async REPLICAS=1 REDLOCK_SERVERS=0
        HTTP_PORT="$http" REDIS_PORT="$redis" REPLICA_PORT_BASE="$svc" PG_PORT="$pg"
        PGHA_API_PORT_BASE="$api" PGHA_ETCD_PORT="$etcd" PGHA_ETCD_PEER_PORT=$((etcd + 1))
        STOCKD="$build/stockd")
    harness_on_exit "pg_ha__down $dir"
    check_group_begin "pg_ha"
    echo "(PG_HA=1 scripts/stack.sh up: RUN_DIR=$dir, log $log)"

    pg_ha__stack() { env "${env[@]}" timeout --kill-after=10 150 scripts/stack.sh "$@"; }
    pg_ha__sale() {
        curl -sS -m 10 -o "$body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
            -H "Idempotency-Key: pg-ha-$$-$1" --data '{"goods_id":1,"count":1}' \
            "http://127.0.0.1:$http/api/deduct" 2>/dev/null || echo 000
    }
    # psql and curl straight, not through stack.sh, whose start-up costs seconds on a busy
    # machine: the primary found as the service finds it, and as Patroni's REST API says.
    pg_ha__order_on_primary() {
        local id as=()
        id=$(sed -n 's/.*"order_id":\([0-9]*\).*/\1/p' "$body")
        [ "$(id -u)" -ne 0 ] || as=(runuser -u postgres --)
        [ -n "$id" ] && [ "$("${as[@]}" psql -X -Atc "SELECT count(*) FROM orders WHERE id = $id" \
            "host=127.0.0.1,127.0.0.1,127.0.0.1 port=$pg,$((pg + 1)),$((pg + 2)) dbname=stock \
user=postgres connect_timeout=2 target_session_attrs=read-write" 2>>"$log")" = 1 ]
    }
    pg_ha__leader() {
        local n
        for n in 1 2 3; do
            curl -fsS -o /dev/null -m 2 "http://127.0.0.1:$((api + n - 1))/primary" 2>/dev/null &&
                { echo "$n"; return 0; }
        done
        return 1
    }

    t0=$(date +%s)
    if ! pg_ha__stack up >"$log" 2>&1; then
        tail -30 "$log" >&2
        check "PG_HA=1 scripts/stack.sh up starts" false
        check_group_end
        pg_ha__down "$dir"
        return 0
    fi
    check "PG_HA=1 scripts/stack.sh up starts" true
    echo "(up took $(($(date +%s) - t0)) s)"
    pg_ha__stack pg-ha-list >"$dir/list" 2>>"$log" || true
    cat "$dir/list"
    check "patronictl list: one leader and two replicas, running" \
        pg_ha__roles "$dir/list" 1 2
    curl -sS -m 5 "http://127.0.0.1:$svc/api/replica" >"$dir/replica" 2>/dev/null || true
    check "GET /api/replica says pg_replication async" grep -q '"pg_replication":"async"' "$dir/replica"
    status=$(pg_ha__sale 0)
    check "a sale through the HA stack answers 200 ($status)" [ "$status" = 200 ]
    check "its order is in orders on the primary" pg_ha__order_on_primary

    old=$(pg_ha__leader) || old=""
    t0=$(date +%s%N)
    pg_ha__stack pg-ha-kill leader >>"$log" 2>&1 || true
    # One sale every 0.2 s until one answers 200, for 45 s at most.
    for ((i = 1; i <= 225; i++)); do
        status=$(pg_ha__sale "$i")
        n=$((n + 1))
        [ "$status" = 500 ] && saw500=1
        if [ "$status" = 200 ]; then
            first=$((($(date +%s%N) - t0) / 1000000))
            break
        fi
        sleep 0.2
    done
    echo "(primary pg-$old killed; first 200 after ${first:-never} ms, after $n tries)"
    new=$(pg_ha__leader) || new=""
    check "a standby took over (pg-$old -> pg-${new:-none})" [ -n "$new" ] && [ "$new" != "$old" ]
    check "a sale answers 200 after the failover, with no restart of the service" [ -n "$first" ]
    check "its order is in orders on the new primary" pg_ha__order_on_primary
    check "no 500 during the failover (503 unavailable, then 200)" [ "$saw500" = 0 ]

    t0=$(date +%s)
    pg_ha__stack down >>"$log" 2>&1 || true
    : >"$dir/down-done"
    echo "(down took $(($(date +%s) - t0)) s)"
    check "pg_ha: svc-1 stopped with status 0" [ "$(cat "$dir/replicas/svc-1.exit" 2>/dev/null)" = 0 ]
    check "pg_ha: svc-1's log holds no sanitizer report" it__no_sanitizer_report "$dir/logs/svc-1.log"
    check "pg_ha: down stopped every PostgreSQL and Patroni" pg_ha__nothing_left "$dir"
    check_group_end
    mkdir -p "$HARNESS_LOG_DIR/pg_ha"
    cp "$dir"/logs/*.log "$HARNESS_LOG_DIR/pg_ha/" 2>/dev/null || true
    pg_ha__down "$dir"
}

# pg_ha__roles LIST LEADERS REPLICAS: patronictl's table holds that many of each, running
# (a replica that streams is "running" in Patroni 3.0's table, "streaming" in later ones).
pg_ha__roles() {
    local leaders replicas
    leaders=$(grep -cE '\| Leader +\| running ' "$1")
    replicas=$(grep -cE '\| (Replica|Sync Standby) +\| (running|streaming) ' "$1")
    [ "$leaders" = "$2" ] && [ "$replicas" = "$3" ]
}

pg_ha__nothing_left() {
    local f pid
    for f in "$1"/pgha/pg-*/patroni.pid "$1"/pgha/pg-*/data/postmaster.pid; do
        [ -e "$f" ] || continue
        pid=$(head -1 "$f")
        if [ -n "$pid" ] && [ -d "/proc/$pid" ] && ! grep -q Z "/proc/$pid/stat" 2>/dev/null; then
            tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$1" && {
                echo "    still running: $pid ($f)" >&2
                return 1
            }
        fi
    done
    return 0
}

# Stops whatever the run directory still runs (after a failure half-way), then removes it.
pg_ha__down() {
    local dir=$1
    [ -d "$dir" ] || return 0
    [ -e "$dir/down-done" ] || RUN_DIR=$dir PG_HA=1 scripts/stack.sh down >/dev/null 2>&1 || true
    rm -rf "$dir"
}

# Run by itself: the same harness as run-all.sh, this suite only.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    [ $# -eq 1 ] || { echo "usage: tests/pg_ha.sh BUILD_DIR" >&2; exit 2; }
    cd "$(dirname "${BASH_SOURCE[0]}")/.."
    LOG_PREFIX=tests
    source scripts/lib/common.sh
    source scripts/lib/ports.sh
    source tests/lib/harness.sh
    source tests/integration.sh
    HARNESS_LOG_DIR=$PWD/$1/test-logs-pg_ha
    rm -rf "$HARNESS_LOG_DIR"
    harness_init
    run_pg_ha "$1"
    harness_summary
fi
