# cluster.sh - the CLUSTER=1 profile of the native stack: a Redis Cluster of three masters in
# place of the single Redis (sourced, bash; needs common.sh, config.sh, redis.sh's
# REDIS_SERVER).
#
# Node N (1..3) listens on CLUSTER_PORT_BASE+N-1 and talks to the others on its cluster bus,
# CLUSTER_BUS_PORT_BASE+N-1 (set with --cluster-port: the default, port+10000, would be above
# 32767). Each has its directory $RUN_DIR/cluster/N (PID, port and nodes.conf) and its log
# $LOG_DIR/cluster-N.log. `redis-cli --cluster create` gives each a third of the slots; no
# replicas. Like the single Redis nothing is persisted, nodes.conf included: every `up` of a
# stopped cluster makes a new one (locks are only worth their lease). The replicas get the
# nodes in REDIS_CLUSTER_NODES (config.sh) and route each lock to its master by slot.

cluster__dir() { echo "$RUN_DIR/cluster/$1"; }

cluster_port() { echo $((CLUSTER_PORT_BASE + $1 - 1)); }

# redis-server's process title: "redis-server 127.0.0.1:PORT [cluster]".
cluster__pattern() {
    local port=""
    [ -r "$(cluster__dir "$1")/redis.port" ] && read -r port <"$(cluster__dir "$1")/redis.port"
    echo "redis-server 127.0.0.1:${port:-$(cluster_port "$1")}"
}

cluster_pid() {
    pidfile_alive "$(cluster__dir "$1")/redis.pid" "$(cluster__pattern "$1")"
}


# True when every node says cluster_state:ok.
cluster__ok() {
    local n
    for n in 1 2 3; do
        redis-cli -h 127.0.0.1 -p "$(cluster_port "$n")" cluster info 2>/dev/null |
            grep -q '^cluster_state:ok' || return 1
    done
}

cluster__start_node() {
    local n=$1 port dir
    port=$(cluster_port "$n")
    dir=$(cluster__dir "$n")
    require_port_free "$port" "cluster node $n" CLUSTER_PORT_BASE
    require_port_free $((CLUSTER_BUS_PORT_BASE + n - 1)) "cluster node $n's bus" CLUSTER_BUS_PORT_BASE
    rm -f "$dir/nodes.conf" # a new cluster, empty
    redis__launch "cluster node $n" "$port" "$dir" "$LOG_DIR/cluster-$n.log" \
        --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" \
        --cluster-port $((CLUSTER_BUS_PORT_BASE + n - 1)) --cluster-node-timeout 2000
}

# Starts the three nodes and joins them, unless the cluster runs and is ok already.
cluster_start() {
    local n running=0
    for n in 1 2 3; do
        if cluster_pid "$n" >/dev/null; then running=$((running + 1)); fi
    done
    if [ $running -eq 3 ] && cluster__ok; then
        log "redis cluster already running (127.0.0.1:$(cluster_port 1)..$(cluster_port 3))"
        return 0
    fi
    # Some nodes without the others: the slots of the missing ones are lost with their
    # nodes.conf. Start again from nothing.
    cluster_stop
    [ -x "$REDIS_SERVER" ] || die "redis-server not found (scripts/deps.sh ensure)"
    for n in 1 2 3; do
        cluster__start_node "$n"
    done
    timeout 60 redis-cli --cluster create "127.0.0.1:$(cluster_port 1)" \
        "127.0.0.1:$(cluster_port 2)" "127.0.0.1:$(cluster_port 3)" --cluster-yes \
        >"$LOG_DIR/cluster-create.log" 2>&1 ||
        { log_tail "$LOG_DIR/cluster-create.log"; die "redis-cli --cluster create failed"; }
    wait_until 20 cluster__ok || die "the redis cluster did not reach cluster_state:ok"
    log "redis cluster ok: 3 masters (REDIS_CLUSTER_NODES=$REDIS_CLUSTER_NODES)"
}

# Stops every node this run directory has started, by PID.
cluster_stop() {
    local n failed=0
    for n in $(numbered_dirs "$RUN_DIR/cluster"); do
        stop_server "cluster node $n" "$(cluster_pid "$n")" "$(cluster__pattern "$n")" \
            TERM:10 KILL:5 || failed=1
    done
    return $failed
}

cluster_status() {
    local n
    for n in 1 2 3; do
        status_row "cluster-$n" "$(cluster_pid "$n")" "127.0.0.1:$(cluster_port "$n")"
    done
}
