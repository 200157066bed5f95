# sentinel.sh - the HA part of the native stack (HA=1): a replica of Redis and three Sentinels
# watching the master (sourced, bash; needs common.sh, config.sh, redis.sh).
# shellcheck shell=bash
#
# The master is redis.sh's Redis on REDIS_PORT; this adds one replica (REDIS_REPLICA_PORT)
# and three Sentinels (SENTINEL_PORT_BASE..+2) that watch it under REDIS_MASTER_NAME with a
# quorum of 2. Failover is fast on purpose (down-after-milliseconds 1000, failover-timeout
# 5000): the chaos report measures what a failover does to requests, not how long Sentinel
# hesitates. Like the master, nothing is persisted: a lock is only worth its lease.
# Everything is started daemonized with a PID file and stopped by that PID.
#
# After a failover the roles stay swapped (the Sentinels rewrite their files, which live in
# RUN_DIR); `down` stops all five whatever their roles are now.

REDIS_SENTINEL=${REDIS_SENTINEL:-/usr/bin/redis-sentinel}
SENTINELS=3

# The process title of each: "redis-server 127.0.0.1:PORT", "redis-sentinel 127.0.0.1:PORT".
ha__pattern() {
    local kind=$1 dir=$2 port=""
    [ -r "$dir/port" ] && read -r port <"$dir/port"
    echo "$kind 127.0.0.1:$port"
}

ha__replica_dir() { echo "$RUN_DIR/redis-replica"; }
ha__sentinel_dir() { echo "$RUN_DIR/sentinel-$1"; }

# Prints the PID of the replica (or Sentinel N) when it runs, else returns 1.
ha_replica_pid() {
    local dir
    dir=$(ha__replica_dir)
    pidfile_alive "$dir/pid" "$(ha__pattern redis-server "$dir")"
}
ha_sentinel_pid() {
    local dir
    dir=$(ha__sentinel_dir "$1")
    pidfile_alive "$dir/pid" "$(ha__pattern redis-sentinel "$dir")"
}

# ha_online_replicas PORT: prints the port of every replica the Redis on PORT counts in sync
# (INFO replication: slaveN:...,port=P,state=online), one a line; nothing when it does not
# answer. (loadtest/chaos waits on it for a new master's replicas.)
ha_online_replicas() {
    redis-cli -h 127.0.0.1 -p "$1" info replication 2>/dev/null |
        sed -n 's/^slave[0-9]*:.*port=\([0-9]*\),state=online.*/\1/p'
}

# Whether the master counts the replica in sync.
ha__replica_online() {
    ha_online_replicas "$REDIS_PORT" | grep -qx "$REDIS_REPLICA_PORT"
}

# True when Sentinel on port $1 knows the master and one connected replica.
ha__sentinel_ready() {
    redis-cli -h 127.0.0.1 -p "$1" sentinel replicas "$REDIS_MASTER_NAME" 2>/dev/null |
        grep -qx slave
}

ha__start_replica() {
    local dir pid
    dir=$(ha__replica_dir)
    if pid=$(ha_replica_pid); then
        log "redis replica already running (pid $pid, port $REDIS_REPLICA_PORT)"
        return 0
    fi
    require_port_free "$REDIS_REPLICA_PORT" "redis replica" REDIS_REPLICA_PORT
    mkdir -p "$dir" "$LOG_DIR"
    rm -f "$dir/pid" "$dir/dump.rdb" # empty at start, like the master (see redis.sh)
    echo "$REDIS_REPLICA_PORT" >"$dir/port"
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_REPLICA_PORT" \
        --replicaof 127.0.0.1 "$REDIS_PORT" \
        --daemonize yes --pidfile "$dir/pid" --logfile "$LOG_DIR/redis-replica.log" \
        --dir "$dir" --save "" --appendonly no --repl-diskless-sync-delay 0 ||
        die "the redis replica did not start (see $LOG_DIR/redis-replica.log)"
    wait_until 10 redis__answers "$REDIS_REPLICA_PORT" || die "the redis replica does not answer"
    # In sync before `up` returns: until the master counts it online, a WAIT (LOCK_SYNC_REPLICAS)
    # has no replica to count, and a failover would promote an empty server.
    wait_until 20 ha__replica_online ||
        die "the redis replica did not come in sync (see $LOG_DIR/redis-replica.log)"
    log "redis replica started (pid $(wait_until 5 ha_replica_pid), 127.0.0.1:$REDIS_REPLICA_PORT)"
}

ha__start_sentinel() {
    local n=$1 port=$((SENTINEL_PORT_BASE + $1 - 1)) dir pid
    dir=$(ha__sentinel_dir "$n")
    if pid=$(ha_sentinel_pid "$n"); then
        log "sentinel $n already running (pid $pid, port $port)"
        return 0
    fi
    [ -x "$REDIS_SENTINEL" ] || die "redis-sentinel not found (scripts/deps.sh ensure)"
    require_port_free "$port" "sentinel $n" SENTINEL_PORT_BASE
    mkdir -p "$dir" "$LOG_DIR"
    rm -f "$dir/pid"
    echo "$port" >"$dir/port"
    # A Sentinel rewrites its file with what it learns (the replicas, the other Sentinels,
    # the current master); a fresh file per start keeps `up` after `down` predictable.
    cat >"$dir/sentinel.conf" <<CONF
sentinel monitor $REDIS_MASTER_NAME 127.0.0.1 $REDIS_PORT 2
sentinel down-after-milliseconds $REDIS_MASTER_NAME 1000
sentinel failover-timeout $REDIS_MASTER_NAME 5000
sentinel parallel-syncs $REDIS_MASTER_NAME 1
CONF
    "$REDIS_SENTINEL" "$dir/sentinel.conf" --bind 127.0.0.1 --port "$port" \
        --daemonize yes --pidfile "$dir/pid" --logfile "$LOG_DIR/sentinel-$n.log" \
        --dir "$dir" || die "sentinel $n did not start (see $LOG_DIR/sentinel-$n.log)"
    wait_until 10 redis__answers "$port" || die "sentinel $n does not answer on port $port"
    log "sentinel $n started (pid $(wait_until 5 ha_sentinel_pid "$n"), 127.0.0.1:$port)"
}

# Starts the replica and the Sentinels unless running; returns once every Sentinel has
# found the replica (a failover before that would have nothing to promote).
ha_start() {
    local n
    ha__start_replica
    for ((n = 1; n <= SENTINELS; n++)); do
        ha__start_sentinel "$n"
    done
    for ((n = 1; n <= SENTINELS; n++)); do
        wait_until 20 ha__sentinel_ready $((SENTINEL_PORT_BASE + n - 1)) ||
            die "sentinel $n has not found the replica (see $LOG_DIR/sentinel-$n.log)"
    done
    log "sentinels watch '$REDIS_MASTER_NAME' (REDIS_SENTINELS=$REDIS_SENTINELS)"
}

# Stops the Sentinels first (so they do not fail over a master being stopped), then the
# replica.
ha_stop() {
    local n failed=0
    for ((n = 1; n <= SENTINELS; n++)); do
        stop_server "sentinel $n" "$(ha_sentinel_pid "$n")" \
            "$(ha__pattern redis-sentinel "$(ha__sentinel_dir "$n")")" TERM:10 KILL:5 || failed=1
    done
    stop_server "redis replica" "$(ha_replica_pid)" \
        "$(ha__pattern redis-server "$(ha__replica_dir)")" TERM:10 KILL:5 || failed=1
    return $failed
}

ha_status() {
    local n
    status_row redis-rep "$(ha_replica_pid)" "127.0.0.1:$REDIS_REPLICA_PORT"
    for ((n = 1; n <= SENTINELS; n++)); do
        status_row "sentinel-$n" "$(ha_sentinel_pid "$n")" "127.0.0.1:$((SENTINEL_PORT_BASE + n - 1))"
    done
}
