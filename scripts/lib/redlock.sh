# redlock.sh - the independent redis-servers of the redlock mode (sourced, bash; needs
# common.sh, config.sh, redis.sh's REDIS_SERVER).
# shellcheck shell=bash
#
# REDLOCK_SERVERS (5) plain Redis servers, node N on REDLOCK_PORT_BASE+N-1, each with its
# own directory $RUN_DIR/redlock/N (PID and port files) and log $LOG_DIR/redlock-N.log. They
# know nothing of each other (no replication, no Sentinel): Redlock's premise is N servers
# that fail independently. Like the main Redis they keep nothing on disk. The replicas get
# their addresses in REDLOCK_NODES (config.sh).

redlock__dir() { echo "$RUN_DIR/redlock/$1"; }

redlock__pattern() {
    local port=""
    [ -r "$(redlock__dir "$1")/redis.port" ] && read -r port <"$(redlock__dir "$1")/redis.port"
    echo "redis-server 127.0.0.1:${port:-$(redlock_port "$1")}"
}

# Port of Redlock node N (1-based).
redlock_port() {
    echo $((REDLOCK_PORT_BASE + $1 - 1))
}

# Prints node N's PID when it runs, else returns 1.
redlock_pid() {
    pidfile_alive "$(redlock__dir "$1")/redis.pid" "$(redlock__pattern "$1")"
}

redlock__ping() {
    [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
}

# Starts node N unless it runs; returns once it answers PING.
redlock_start() {
    local n=$1 pid port dir
    port=$(redlock_port "$n")
    dir=$(redlock__dir "$n")
    if pid=$(redlock_pid "$n"); then
        log "redlock node $n already running (pid $pid, port $port)"
        return 0
    fi
    [ -x "$REDIS_SERVER" ] || die "redis-server not found (scripts/deps.sh ensure)"
    require_port_free "$port" "redlock node $n" REDLOCK_PORT_BASE
    mkdir -p "$dir" "$LOG_DIR"
    rm -f "$dir/redis.pid"
    echo "$port" >"$dir/redis.port"
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" \
        --daemonize yes --pidfile "$dir/redis.pid" \
        --logfile "$LOG_DIR/redlock-$n.log" --dir "$dir" \
        --save "" --appendonly no ||
        die "redlock node $n did not start (see $LOG_DIR/redlock-$n.log)"
    if ! wait_until 10 redlock__ping "$port" || ! pid=$(wait_until 5 redlock_pid "$n"); then
        log_tail "$LOG_DIR/redlock-$n.log"
        port_explain "$port"
        die "redlock node $n did not answer PING on port $port"
    fi
    log "redlock node $n started (pid $pid, 127.0.0.1:$port)"
}

# Stops node N by its PID (SIGTERM; nothing to save).
redlock_stop() {
    local pid
    pid=$(redlock_pid "$1") || return 0
    log "stopping redlock node $1 (pid $pid)"
    stop_pid "redlock node $1" "$pid" "$(redlock__pattern "$1")" TERM:10 KILL:5
}

# The nodes this run directory has started (1..N), whatever REDLOCK_SERVERS says now.
redlock_known() {
    local d
    for d in "$RUN_DIR"/redlock/*/; do
        [ -d "$d" ] || continue
        d=${d%/}
        d=${d##*/}
        [[ $d =~ ^[0-9]+$ ]] && echo "$d"
    done
}

redlock_status() {
    local n pid
    for ((n = 1; n <= REDLOCK_SERVERS; n++)); do
        if pid=$(redlock_pid "$n"); then
            echo "redlock-$n  running  pid $pid  127.0.0.1:$(redlock_port "$n")"
        else
            echo "redlock-$n  stopped"
        fi
    done
}
