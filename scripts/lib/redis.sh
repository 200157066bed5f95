# redis.sh - a private Redis under $REDIS_DIR (sourced, bash; needs common.sh, config.sh).
# shellcheck shell=bash
#
# Redis here only holds locks (lock:goods:N, with a TTL), so it runs without persistence:
# --save "" and --appendonly no. A lock that disappears with a Redis restart is exactly the
# failure the `redis` mode's fencing token is there for (the database refuses the write of
# a holder whose lock was lost), and a restart that kept stale locks would only make
# requests wait for leases nobody renews. Loopback only; protected mode stays on.

REDIS_SERVER=${REDIS_SERVER:-/usr/bin/redis-server}

# redis-server rewrites its process title to "redis-server 127.0.0.1:PORT". The port is the
# one it was started on (recorded), so that `down` finds it whatever REDIS_PORT says now.
redis__pattern() {
    local port=""
    [ -r "$REDIS_DIR/redis.port" ] && read -r port <"$REDIS_DIR/redis.port"
    echo "redis-server 127.0.0.1:${port:-$REDIS_PORT}"
}

# Prints Redis' PID when it runs, else returns 1.
redis_pid() {
    pidfile_alive "$REDIS_DIR/redis.pid" "$(redis__pattern)"
}

redis__ping() {
    [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]
}

# Starts Redis unless it runs already; returns once it answers PING.
redis_start() {
    local pid
    if pid=$(redis_pid); then
        log "redis already running (pid $pid, port $REDIS_PORT)"
        return 0
    fi
    [ -x "$REDIS_SERVER" ] || die "redis-server not found (scripts/deps.sh ensure)"
    require_port_free "$REDIS_PORT" redis REDIS_PORT
    mkdir -p "$REDIS_DIR" "$LOG_DIR"
    rm -f "$REDIS_DIR/redis.pid"
    echo "$REDIS_PORT" >"$REDIS_DIR/redis.port"
    # --daemonize: redis forks, starts a session of its own and writes its PID file.
    # --repl-diskless-sync-delay 0: with HA=1, a replica (the HA one, or this server come back
    # after a failover) is sent its first copy at once, not after the default 5 s wait for
    # more replicas to share it; until then LOCK_SYNC_REPLICAS refuses every grant.
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" \
        --daemonize yes --pidfile "$REDIS_DIR/redis.pid" \
        --logfile "$LOG_DIR/redis.log" --dir "$REDIS_DIR" \
        --save "" --appendonly no --repl-diskless-sync-delay 0 ||
        die "redis-server did not start (see $LOG_DIR/redis.log)"
    if ! wait_until 10 redis__ping || ! pid=$(wait_until 5 redis_pid); then
        log_tail "$LOG_DIR/redis.log"
        port_explain "$REDIS_PORT"
        die "redis did not answer PING on port $REDIS_PORT"
    fi
    log "redis started (pid $pid, 127.0.0.1:$REDIS_PORT)"
}

# Stops Redis by its PID: SIGTERM is its clean shutdown (nothing to save here).
redis_stop() {
    local pid
    pid=$(redis_pid) || return 0
    log "stopping redis (pid $pid)"
    stop_pid redis "$pid" "$(redis__pattern)" TERM:10 KILL:5
}

redis_status() {
    local pid
    if pid=$(redis_pid); then
        echo "redis      running  pid $pid  $(redis__pattern | sed "s/^redis-server //")"
    else
        echo "redis      stopped"
    fi
}
