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

# The recipe, for any one-member etcd of the stack (this one, and Patroni's in patroni.sh):
# a member named NAME with its files in DIR (data/, etcd.pid, etcd.port), listening on
# PORT and PEER_PORT, logging to LOGFILE.

# What its command line contains: the client port it was started on (recorded), so that
# `down` finds it whatever the environment says now.
etcd__pattern_in() {
    local dir=$1 port=""
    [ -r "$dir/etcd.port" ] && read -r port <"$dir/etcd.port"
    echo "--listen-client-urls http://127.0.0.1:${port:-$2}"
}

# etcd__pid_in DIR PORT: prints the PID when it runs, else returns 1.
etcd__pid_in() {
    pidfile_alive "$1/etcd.pid" "$(etcd__pattern_in "$1" "$2")"
}

etcd__healthy_at() {
    curl -fsS --max-time 1 "http://127.0.0.1:$1/health" 2>/dev/null | grep -q '"true"'
}

# etcd__start_in NAME DIR PORT PEER_PORT LOGFILE WHAT PORT_VAR PEER_VAR: starts it unless it
# runs; returns once /health answers true. WHAT names it in messages, the *_VAR the
# settings that move its ports.
etcd__start_in() {
    local name=$1 dir=$2 port=$3 peer_port=$4 logfile=$5 what=$6 pid url peer
    if pid=$(etcd__pid_in "$dir" "$port"); then
        log "$what already running (pid $pid, port $port)"
        return 0
    fi
    [ -x "$ETCD_SERVER" ] || die "etcd not found (scripts/deps.sh ensure etcd)"
    require_port_free "$port" "$what" "$7"
    require_port_free "$peer_port" "$what peer" "$8"
    mkdir -p "$dir" "$(dirname "$logfile")"
    echo "$port" >"$dir/etcd.port"
    url=http://127.0.0.1:$port
    peer=http://127.0.0.1:$peer_port
    setsid "$ETCD_SERVER" --name "$name" --data-dir "$dir/data" \
        --listen-client-urls "$url" --advertise-client-urls "$url" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "$name=$peer" --listen-metrics-urls "" \
        </dev/null >>"$logfile" 2>&1 &
    echo $! >"$dir/etcd.pid"
    if ! wait_until 30 etcd__healthy_at "$port" || ! pid=$(etcd__pid_in "$dir" "$port"); then
        log_tail "$logfile"
        die "$what did not become healthy on port $port"
    fi
    log "$what started (pid $pid, $url)"
}

# etcd__stop_in DIR PORT WHAT: by its PID; SIGTERM is its clean shutdown.
etcd__stop_in() {
    stop_server "$3" "$(etcd__pid_in "$1" "$2")" "$(etcd__pattern_in "$1" "$2")" TERM:10 KILL:5
}

# Prints etcd's PID when it runs, else returns 1.
etcd_pid() {
    etcd__pid_in "$ETCD_DIR" "$ETCD_PORT"
}

etcd_start() {
    etcd__start_in stock "$ETCD_DIR" "$ETCD_PORT" "$ETCD_PEER_PORT" "$LOG_DIR/etcd.log" etcd \
        ETCD_PORT ETCD_PEER_PORT
}

etcd_stop() {
    etcd__stop_in "$ETCD_DIR" "$ETCD_PORT" etcd
}

etcd_status() {
    status_row etcd "$(etcd_pid)" "127.0.0.1:$ETCD_PORT"
}
