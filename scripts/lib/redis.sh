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

# True when the redis-server (or Sentinel) on 127.0.0.1:PORT answers PING.
redis__answers() {
    [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = PONG ]
}

# redis__launch NAME PORT DIR LOG [ARG...]: starts a redis-server for NAME ("redlock node 2")
# on 127.0.0.1:PORT with the extra ARGs (a cluster node's, ...), daemonized, empty and keeping
# nothing on disk (see the top of this file) unless the ARGs say otherwise, its PID and port files in DIR and its log LOG.
# Returns once it answers PING and its PID file names it, and says so; dies otherwise, with
# the log's last lines and what holds the port. The caller has checked the port is free.
redis__launch() {
    local name=$1 port=$2 dir=$3 logfile=$4 pid
    shift 4
    [ -x "$REDIS_SERVER" ] || die "redis-server not found (scripts/deps.sh ensure)"
    mkdir -p "$dir" "$LOG_DIR"
    # Starts empty, always: --save "" keeps Redis from writing a snapshot, but a server that
    # was once a replica (HA=1, after a failover) was sent one and kept it as dump.rdb, which
    # it would load now: locks and fencing counters from an earlier run.
    rm -f "$dir/redis.pid" "$dir/dump.rdb"
    echo "$port" >"$dir/redis.port"
    # --daemonize: redis forks, starts a session of its own and writes its PID file.
    # The ARGs after the defaults, so that they may change them (a Redlock node's appendonly).
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save "" --appendonly no "$@" \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$logfile" --dir "$dir" ||
        die "$name did not start (see $logfile)"
    if ! wait_until 10 redis__answers "$port" ||
        ! pid=$(wait_until 5 pidfile_alive "$dir/redis.pid" "redis-server 127.0.0.1:$port"); then
        log_tail "$logfile"
        port_explain "$port"
        die "$name did not answer PING on port $port"
    fi
    log "$name started (pid $pid, 127.0.0.1:$port)"
}

# Starts Redis unless it runs already; returns once it answers PING.
redis_start() {
    local pid
    if pid=$(redis_pid); then
        log "redis already running (pid $pid, port $REDIS_PORT)"
        return 0
    fi
    require_port_free "$REDIS_PORT" redis REDIS_PORT
    # --repl-diskless-sync-delay 0: with HA=1, a replica (the HA one, or this server come back
    # after a failover) is sent its first copy at once, not after the default 5 s wait for
    # more replicas to share it; until then LOCK_SYNC_REPLICAS refuses every grant.
    redis__launch redis "$REDIS_PORT" "$REDIS_DIR" "$LOG_DIR/redis.log" \
        --repl-diskless-sync-delay 0
}

# Stops Redis by its PID: SIGTERM is its clean shutdown (nothing to save here).
redis_stop() {
    stop_server redis "$(redis_pid)" "$(redis__pattern)" TERM:10 KILL:5
}

# SIGSTOP Redis by its PID: a server that hangs (nothing refused, nothing answered), for the
# tests' "dependency frozen" case; redis_thaw undoes it.
redis_freeze() {
    local pid
    pid=$(redis_pid) || die "redis is not running"
    kill -STOP "$pid"
    log "redis frozen (SIGSTOP to pid $pid)"
}

redis_thaw() {
    local pid
    pid=$(redis_pid) || die "redis is not running"
    kill -CONT "$pid"
    log "redis thawed (SIGCONT to pid $pid)"
}

redis_status() {
    status_row redis "$(redis_pid)" "$(redis__pattern | sed "s/^redis-server //")"
}
