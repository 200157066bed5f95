# etcd.sh - a private one-member etcd under $ETCD_DIR, for the etcd mode (sourced, bash;
# needs common.sh, config.sh). Started by `up` only with WITH_ETCD=1, so a stack without the
# etcd mode needs no etcd-server; `down` stops it whenever it runs.
# shellcheck shell=bash
#
# Loopback only, client port ETCD_PORT and peer port ETCD_PEER_PORT. etcd does not
# daemonize: it is started in the background in a session of its own (setsid) and its PID
# recorded; it is stopped by that PID. Its data (the lock keys and leases) is kept under
# $ETCD_DIR/data across restarts, as a real member keeps it.

ETCD_SERVER=${ETCD_SERVER:-/usr/bin/etcd}

etcd__pattern() {
    local port=""
    [ -r "$ETCD_DIR/etcd.port" ] && read -r port <"$ETCD_DIR/etcd.port"
    echo "--listen-client-urls http://127.0.0.1:${port:-$ETCD_PORT}"
}

# Prints etcd's PID when it runs, else returns 1.
etcd_pid() {
    pidfile_alive "$ETCD_DIR/etcd.pid" "$(etcd__pattern)"
}

etcd__healthy() {
    curl -fsS --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"true"'
}

# Starts etcd unless it runs already; returns once /health answers true.
etcd_start() {
    local pid url peer
    if pid=$(etcd_pid); then
        log "etcd already running (pid $pid, port $ETCD_PORT)"
        return 0
    fi
    [ -x "$ETCD_SERVER" ] || die "etcd not found (scripts/deps.sh ensure etcd)"
    require_port_free "$ETCD_PORT" etcd ETCD_PORT
    require_port_free "$ETCD_PEER_PORT" "etcd peer" ETCD_PEER_PORT
    mkdir -p "$ETCD_DIR" "$LOG_DIR"
    echo "$ETCD_PORT" >"$ETCD_DIR/etcd.port"
    url=http://127.0.0.1:$ETCD_PORT
    peer=http://127.0.0.1:$ETCD_PEER_PORT
    setsid "$ETCD_SERVER" --name stock --data-dir "$ETCD_DIR/data" \
        --listen-client-urls "$url" --advertise-client-urls "$url" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "stock=$peer" --listen-metrics-urls "" \
        </dev/null >>"$LOG_DIR/etcd.log" 2>&1 &
    echo $! >"$ETCD_DIR/etcd.pid"
    if ! wait_until 30 etcd__healthy || ! pid=$(etcd_pid); then
        log_tail "$LOG_DIR/etcd.log"
        die "etcd did not become healthy on port $ETCD_PORT"
    fi
    log "etcd started (pid $pid, $url)"
}

# Stops etcd by its PID: SIGTERM is its clean shutdown.
etcd_stop() {
    local pid
    pid=$(etcd_pid) || return 0
    log "stopping etcd (pid $pid)"
    stop_pid etcd "$pid" "$(etcd__pattern)" TERM:10 KILL:5
}

etcd_status() {
    local pid
    if pid=$(etcd_pid); then
        echo "etcd       running  pid $pid  127.0.0.1:$ETCD_PORT"
    else
        echo "etcd       stopped"
    fi
}
