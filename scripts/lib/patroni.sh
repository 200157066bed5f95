# patroni.sh - a replicated PostgreSQL under Patroni (PG_HA=1): three nodes, one primary and
# two standbys, and an etcd of their own as Patroni's store (sourced, bash; needs common.sh,
# config.sh, ports.sh, etcd.sh for the etcd recipe and pg.sh for PG_BIN and pg__children).
# shellcheck shell=bash
#
#   $PGHA_DIR/etcd/            Patroni's etcd (data, PID)
#   $PGHA_DIR/pg-N/patroni.yml node N's Patroni configuration, written at each start
#   $PGHA_DIR/pg-N/data        node N's PostgreSQL cluster (Patroni runs initdb or a base backup)
#   $PGHA_DIR/pg-N/patroni.pid the PID of node N's Patroni
#   $LOG_DIR/pg-N.log          what node N's Patroni says; $PGHA_DIR/pg-N/data/log/: postgres
#
# Node N listens on PGHA_PORT_BASE+N-1 (PostgreSQL) and PGHA_API_PORT_BASE+N-1 (Patroni's REST
# API). Patroni runs as the `postgres` user when we are root, like PostgreSQL itself, and it
# runs PostgreSQL: nothing here calls pg_ctl. Patroni is the only one that decides who is the
# primary, from a leader key in etcd that it must renew every loop_wait seconds and that
# expires after ttl seconds: a node that stops renewing (it died) loses the key, and the
# healthiest standby takes it and promotes itself.
#
# A separate etcd, not the one of the etcd lock mode: the chaos runs stop, freeze and
# partition the lock's etcd, and a Patroni that loses its store demotes its primary; the two
# stories must not be mixed. It also keeps the lock mode's etcd optional (WITH_ETCD).
#
# Demo timings (PGHA_TTL, PGHA_LOOP_WAIT, PGHA_RETRY_TIMEOUT: 8, 1 and 3 s; Patroni's own
# defaults are 30, 10 and 10 s): a dead primary's key is gone within ttl and a standby takes
# over at its next loop, so a failover completes in about ttl + loop_wait, some 9 s. Patroni
# wants loop_wait + 2 * retry_timeout <= ttl, so that a slow etcd cannot cost it the key.
#
# Replication: PG_REPLICATION=async (Patroni's default: a commit is acknowledged once the
# primary has flushed it), sync (synchronous_mode: a commit waits until one standby has
# flushed it too, and only that standby may be promoted), strict (synchronous_mode_strict:
# also when no standby is left, where plain sync degrades to async so as to keep writing).

# The bootstrap section of patroni.yml, shared with the compose profile's nodes.
# shellcheck source=scripts/lib/patroni_bootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/patroni_bootstrap.sh"

PATRONI=${PATRONI:-/usr/bin/patroni}
PATRONICTL=${PATRONICTL:-/usr/bin/patronictl}
PGHA_NODES=3
PGHA_TTL=${PGHA_TTL:-8}
PGHA_LOOP_WAIT=${PGHA_LOOP_WAIT:-1}
PGHA_RETRY_TIMEOUT=${PGHA_RETRY_TIMEOUT:-3}
# How far behind (bytes of WAL) a standby may be and still be promoted. Patroni's default,
# 1 MB, is also the most an asynchronous failover may lose; it is kept.
PGHA_MAX_LAG=${PGHA_MAX_LAG:-1048576}

pgha__user() { pg__user; }
pgha__node_dir() { echo "$PGHA_DIR/pg-$1"; }
pgha__port() { echo $((PGHA_PORT_BASE + $1 - 1)); }
pgha__api_port() { echo $((PGHA_API_PORT_BASE + $1 - 1)); }

# ---- Patroni's etcd (etcd.sh's recipe) ----

pgha_etcd_pid() { etcd__pid_in "$PGHA_DIR/etcd" "$PGHA_ETCD_PORT"; }

pgha__etcd_start() {
    etcd__start_in patroni "$PGHA_DIR/etcd" "$PGHA_ETCD_PORT" "$PGHA_ETCD_PEER_PORT" \
        "$LOG_DIR/pgha-etcd.log" "patroni's etcd" PGHA_ETCD_PORT PGHA_ETCD_PEER_PORT
}

# ---- one node ----

pgha__pattern() { echo "$PATRONI $(pgha__node_dir "$1")/patroni.yml"; }

# Prints node N's Patroni PID when it runs, else returns 1.
pgha_node_pid() {
    pidfile_alive "$(pgha__node_dir "$1")/patroni.pid" "$(pgha__pattern "$1")"
}

# Prints node N's postmaster PID when it runs, else returns 1.
pgha_postmaster_pid() {
    local data
    data=$(pgha__node_dir "$1")/data
    pidfile_alive "$data/postmaster.pid" "-D $data"
}

# The configuration of node N. bootstrap.dcs is read only by the node that initialises the
# cluster, and kept in etcd afterwards; pgha_start changes it there for a running cluster
# (patronictl edit-config), so that PG_REPLICATION takes effect at every `up`.
pgha__write_config() {
    local n=$1 dir port api
    dir=$(pgha__node_dir "$n")
    port=$(pgha__port "$n")
    api=$(pgha__api_port "$n")
    as_user "$(pgha__user)" tee "$dir/patroni.yml" >/dev/null <<EOF
# Written by scripts/lib/patroni.sh at each start (see its header).
scope: stock
namespace: /stock-pgha/
name: pg-$n
restapi:
  listen: 127.0.0.1:$api
  connect_address: 127.0.0.1:$api
etcd3:
  host: 127.0.0.1:$PGHA_ETCD_PORT
$(patroni_bootstrap_yaml "$PG_REPLICATION" "$PGHA_TTL" "$PGHA_LOOP_WAIT" "$PGHA_RETRY_TIMEOUT" \
    "$PGHA_MAX_LAG" "        max_connections: $(pg__max_connections)
        # Durability as in pg.sh: PostgreSQL's defaults, spelled out.
        fsync: 'on'
        synchronous_commit: 'on'
        full_page_writes: 'on'
        hot_standby: 'on'")
postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $dir/data
  bin_dir: $PG_BIN
  pgpass: $dir/pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '$dir/sock'
    log_line_prefix: '%m [%p] %q%u@%d '
    logging_collector: 'on'
    log_directory: log
  # Loopback only, trust: a development database nobody else can reach (see pg.sh).
  pg_hba:
  - local all all trust
  - local replication all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
EOF
}

# Starts node N's Patroni unless it runs. Does not wait for PostgreSQL.
pgha_node_start() {
    local n=$1 dir pid user
    dir=$(pgha__node_dir "$n")
    user=$(pgha__user)
    if pid=$(pgha_node_pid "$n"); then
        return 0
    fi
    require_port_free "$(pgha__port "$n")" "pg-$n" PGHA_PORT_BASE
    require_port_free "$(pgha__api_port "$n")" "patroni pg-$n" PGHA_API_PORT_BASE
    mkdir -p "$dir" "$LOG_DIR"
    if [ "$(id -u)" -eq 0 ]; then
        chown "$user": "$PGHA_DIR" "$dir"
        as_user "$user" test -x "$dir" ||
            die "user $user cannot reach $dir: make its parent directories mode 755, or set RUN_DIR elsewhere"
    fi
    as_user "$user" mkdir -p "$dir/sock"
    pgha__write_config "$n"
    rm -f "$dir/patroni.pid"
    touch "$LOG_DIR/pg-$n.log"
    # The shell writes its own PID, then becomes Patroni by exec: the recorded PID is
    # Patroni's, whoever it runs as. setsid: no terminal signal reaches it.
    local -a as=()
    [ "$(id -u)" -ne 0 ] || as=(runuser -u "$user" --)
    # shellcheck disable=SC2016 # expanded by the inner shell
    setsid "${as[@]}" bash -c 'echo $$ >"$1"; shift; exec "$@"' pgha \
        "$dir/patroni.pid" "$PATRONI" "$dir/patroni.yml" </dev/null >>"$LOG_DIR/pg-$n.log" 2>&1 &
    if ! wait_until 10 pgha_node_pid "$n" >/dev/null; then
        log_tail "$LOG_DIR/pg-$n.log"
        die "patroni pg-$n did not start"
    fi
    log "patroni pg-$n started (pid $(pgha_node_pid "$n"), postgres 127.0.0.1:$(pgha__port "$n"), api :$(pgha__api_port "$n"))"
}

# Stops node N: SIGTERM to Patroni, which stops its PostgreSQL (fast) and exits; then, if a
# postmaster is left (Patroni was killed), that one by its PID, as pg.sh stops its own.
pgha_node_stop() {
    local n=$1 pid data
    if pid=$(pgha_node_pid "$n"); then
        stop_pid "patroni pg-$n" "$pid" "$(pgha__pattern "$n")" TERM:60 KILL:5 || return 1
    fi
    data=$(pgha__node_dir "$n")/data
    if pid=$(pgha_postmaster_pid "$n"); then
        stop_pid "postgres pg-$n" "$pid" "-D $data" INT:30 QUIT:10 KILL:5 || return 1
    fi
    return 0
}

# Kills node N as a host dies: SIGKILL to Patroni first (so that it cannot restart its
# PostgreSQL), then to the postmaster and every backend, by PID. Nothing is shut down
# cleanly, nothing is said to etcd: the leader key expires by itself after ttl.
# The PIDs are gathered first, then signalled by one `kill` (a builtin: no fork between
# them), so that the node dies at one moment even on a busy machine. A backend that forks
# after the list was made sees its postmaster gone and exits by itself.
pgha_node_kill() {
    local n=$1 ppid mpid kids=""
    ppid=$(pgha_node_pid "$n") || true
    mpid=$(pgha_postmaster_pid "$n") || true
    [ -n "$ppid$mpid" ] || die "pg-$n is not running"
    [ -z "$mpid" ] || kids=$(pg__children "$mpid" | tr '\n' ' ')
    # shellcheck disable=SC2086 # one PID per word
    kill -KILL $ppid $mpid $kids 2>/dev/null || true
    log "pg-$n killed (SIGKILL to patroni ${ppid:-none}, postmaster ${mpid:-none} and its children)"
}

# ---- the cluster ----

# Patroni's view of node N's role from its REST API ("primary"/"master" or "replica"), or
# nothing when it does not answer.
pgha__role() {
    curl -fsS --max-time 1 "http://127.0.0.1:$(pgha__api_port "$1")/patroni" 2>/dev/null |
        sed -n 's/.*"role": *"\([a-z_]*\)".*/\1/p'
}

# Prints the number of the node that is the running primary (Patroni's REST /primary answers
# 200 there only), or returns 1.
pgha_leader() {
    local n
    for ((n = 1; n <= PGHA_NODES; n++)); do
        if curl -fsS -o /dev/null --max-time 1 \
            "http://127.0.0.1:$(pgha__api_port "$n")/primary" 2>/dev/null; then
            echo "$n"
            return 0
        fi
    done
    return 1
}

# True when node N is a replica that streams from the primary (REST /replica answers 200
# for a running replica; the state check wants its WAL receiver streaming).
pgha__streaming() {
    curl -fsS --max-time 1 "http://127.0.0.1:$(pgha__api_port "$1")/patroni" 2>/dev/null |
        grep -q '"state": *"running"' &&
        curl -fsS -o /dev/null --max-time 1 \
            "http://127.0.0.1:$(pgha__api_port "$1")/replica?lag=16MB" 2>/dev/null
}

# True when a primary runs and every other running node is a streaming replica.
pgha__healthy() {
    local n leader count=0
    leader=$(pgha_leader) || return 1
    for ((n = 1; n <= PGHA_NODES; n++)); do
        [ "$n" = "$leader" ] && continue
        pgha_node_pid "$n" >/dev/null || continue
        pgha__streaming "$n" || return 1
        count=$((count + 1))
    done
    [ "$count" -ge 1 ]
}

pgha_patronictl() {
    as_user "$(pgha__user)" "$PATRONICTL" -c "$(pgha__node_dir 1)/patroni.yml" "$@"
}

# psql as the superuser on the primary, found by libpq (target_session_attrs), as the
# service finds it.
pgha_psql() {
    local db=$1
    shift
    as_user "$(pgha__user)" psql -X -q -v ON_ERROR_STOP=1 \
        "$(pgha_conninfo postgres "$db")" "$@"
}

# The multi-host connection string to the primary for USER and DB.
pgha_conninfo() {
    local n hosts="" ports=""
    for ((n = 1; n <= PGHA_NODES; n++)); do
        hosts+="${hosts:+,}127.0.0.1"
        ports+="${ports:+,}$(pgha__port "$n")"
    done
    echo "host=$hosts port=$ports dbname=$2 user=$1 connect_timeout=2 target_session_attrs=read-write"
}

# Sets the replication mode of a running cluster to PG_REPLICATION (etcd's copy of the
# configuration wins over bootstrap.dcs once the cluster exists).
pgha__apply_mode() {
    local want strict
    case $PG_REPLICATION in
    async) want=false strict=false ;;
    sync) want=true strict=false ;;
    strict) want=true strict=true ;;
    esac
    pgha_patronictl edit-config --force --quiet \
        -s "synchronous_mode=$want" -s "synchronous_mode_strict=$strict" \
        -s "ttl=$PGHA_TTL" -s "loop_wait=$PGHA_LOOP_WAIT" -s "retry_timeout=$PGHA_RETRY_TIMEOUT" \
        >>"$LOG_DIR/pgha-ctl.log" 2>&1 || die "patronictl edit-config failed (see $LOG_DIR/pgha-ctl.log)"
}

# True once synchronous_standby_names on the primary says what PG_REPLICATION asks.
pgha__mode_in_force() {
    local names
    names=$(pgha_psql postgres -Atc 'SHOW synchronous_standby_names' 2>/dev/null) || return 1
    case $PG_REPLICATION in
    async) [ -z "$names" ] ;;
    *) [ -n "$names" ] ;;
    esac
}

# Starts the etcd and the three nodes, waits for a primary and two streaming standbys,
# applies PG_REPLICATION, and creates the role and database `stock` on the primary.
pgha_start() {
    local n have fresh=1
    mkdir -p "$PGHA_DIR"
    [ -x "$PATRONI" ] || die "patroni not found (scripts/deps.sh ensure pg-ha)"
    for ((n = 1; n <= PGHA_NODES; n++)); do
        [ -s "$(pgha__node_dir "$n")/data/PG_VERSION" ] && fresh=0
    done
    pgha__etcd_start
    # All at once: on a new cluster they race for etcd's initialize key, the winner runs
    # initdb and the others wait for it, then copy it (pg_basebackup) and follow.
    for ((n = 1; n <= PGHA_NODES; n++)); do
        pgha_node_start "$n"
    done
    if ! wait_until 120 pgha__healthy; then
        pgha_patronictl list >&2 || true
        die "the cluster did not come up with a primary and streaming standbys within 120 s (see $LOG_DIR/pg-*.log)"
    fi
    # A new cluster took bootstrap.dcs, written from PG_REPLICATION; an existing one keeps
    # what etcd holds, which the last `up` may have set otherwise.
    [ "$fresh" = 1 ] || pgha__apply_mode
    if ! wait_until 30 pgha__mode_in_force; then
        die "synchronous_standby_names does not say '$PG_REPLICATION' after 30 s"
    fi
    have=$(pgha_psql postgres -Atc "SELECT 1 FROM pg_roles WHERE rolname = 'stock'") ||
        die "cannot query the primary"
    [ "$have" = 1 ] || pgha_psql postgres -c "CREATE ROLE stock LOGIN" ||
        die "cannot create the role stock"
    have=$(pgha_psql postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'stock'")
    [ "$have" = 1 ] || pgha_psql postgres -c "CREATE DATABASE stock OWNER stock" ||
        die "cannot create the database stock"
    log "postgres under patroni: primary pg-$(pgha_leader), replication $PG_REPLICATION" \
        "(ttl $PGHA_TTL s, loop_wait $PGHA_LOOP_WAIT s, retry_timeout $PGHA_RETRY_TIMEOUT s)"
}

# Stops the standbys first, then the primary (stopping the primary first would hand its
# role to a standby on the way out), then the etcd.
pgha_stop() {
    local n leader="" failed=0
    leader=$(pgha_leader) || true
    for ((n = 1; n <= PGHA_NODES; n++)); do
        [ "$n" = "$leader" ] && continue
        if pgha_node_pid "$n" >/dev/null || pgha_postmaster_pid "$n" >/dev/null; then
            log "stopping pg-$n"
            pgha_node_stop "$n" || failed=1
        fi
    done
    if [ -n "$leader" ]; then
        log "stopping pg-$leader (the primary)"
        pgha_node_stop "$leader" || failed=1
    fi
    etcd__stop_in "$PGHA_DIR/etcd" "$PGHA_ETCD_PORT" "patroni's etcd" || failed=1
    return $failed
}

pgha_status() {
    local n pid role
    if pid=$(pgha_etcd_pid); then
        echo "pgha-etcd  running  pid $pid  127.0.0.1:$PGHA_ETCD_PORT"
    fi
    for ((n = 1; n <= PGHA_NODES; n++)); do
        if pid=$(pgha_node_pid "$n"); then
            role=$(pgha__role "$n")
            echo "pg-$n       running  pid $pid  127.0.0.1:$(pgha__port "$n")  ${role:-unknown}"
        elif [ -d "$(pgha__node_dir "$n")" ]; then
            echo "pg-$n       stopped"
        fi
    done
}
