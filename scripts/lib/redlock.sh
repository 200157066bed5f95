# redlock.sh - the independent redis-servers of the redlock mode (sourced, bash; needs
# common.sh, config.sh, redis.sh's REDIS_SERVER).
# shellcheck shell=bash
#
# REDLOCK_SERVERS (5) plain Redis servers, node N on REDLOCK_PORT_BASE+N-1, each with its
# own directory $RUN_DIR/redlock/N (PID and port files) and log $LOG_DIR/redlock-N.log. They
# know nothing of each other (no replication, no Sentinel): Redlock's premise is N servers
# that fail independently. Like the main Redis they keep nothing on disk, unless started with
# REDLOCK_APPENDFSYNC=always: then each writes every command to an append-only file in its
# directory and fsyncs it before answering, so that a node killed and started again comes
# back with its keys (Redlock's cure for a restart's amnesia; the ladder's amnesia-fsync row).
# The replicas get their addresses in REDLOCK_NODES (config.sh).

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

# Starts node N unless it runs; returns once it answers PING.
redlock_start() {
    local n=$1 pid port
    port=$(redlock_port "$n")
    if pid=$(redlock_pid "$n"); then
        log "redlock node $n already running (pid $pid, port $port)"
        return 0
    fi
    require_port_free "$port" "redlock node $n" REDLOCK_PORT_BASE
    # REDLOCK_CLOCK_SHIFT=N:FILE: node N's wall clock is moved by the milliseconds FILE holds,
    # read again at every call (build/libclock-shift.so, loadtest/lib/clock_shift.c), so that
    # rewriting FILE ("0", "5000") jumps that server's clock: Redis expires keys by it (the
    # ladder's clock-jump row).
    if [ -n "${REDLOCK_CLOCK_SHIFT:-}" ] && [ "${REDLOCK_CLOCK_SHIFT%%:*}" = "$n" ]; then
        redlock__clock_shift "${REDLOCK_CLOCK_SHIFT#*:}" redlock__launch_node "$n" "$port"
    else
        redlock__launch_node "$n" "$port"
    fi
}

# redlock__clock_shift FILE COMMAND...: COMMAND with build/libclock-shift.so (CLOCK_SHIFT_LIB)
# preloaded, its offset read from FILE ("0" written when FILE is missing).
redlock__clock_shift() {
    local file=$1 lib=${CLOCK_SHIFT_LIB:-$here/../build/libclock-shift.so}
    shift
    [ -r "$lib" ] || die "$lib missing (make builds it)"
    [ -s "$file" ] || echo 0 >"$file"
    # Bash exports a function call's assignments to what the function runs: the server.
    LD_PRELOAD=$lib CLOCK_SHIFT_FILE=$file "$@"
}

# redlock__launch_node N PORT: node N as REDLOCK_APPENDFSYNC says (redlock_start).
redlock__launch_node() {
    local n=$1 port=$2
    case ${REDLOCK_APPENDFSYNC:-} in
    always)
        redis__launch "redlock node $n" "$port" "$(redlock__dir "$n")" "$LOG_DIR/redlock-$n.log" \
            --appendonly yes --appendfsync always
        ;;
    "")
        # Empty: the append-only files of an earlier start with REDLOCK_APPENDFSYNC go.
        rm -rf "$(redlock__dir "$n")/appendonlydir"
        redis__launch "redlock node $n" "$port" "$(redlock__dir "$n")" "$LOG_DIR/redlock-$n.log"
        ;;
    *) die "REDLOCK_APPENDFSYNC: always or unset, not '$REDLOCK_APPENDFSYNC'" ;;
    esac
}

# Kills node N by its PID (SIGKILL): a crash; what it had not written to disk is lost.
redlock_kill() {
    stop_server "redlock node $1" "$(redlock_pid "$1")" "$(redlock__pattern "$1")" KILL:5
}

# Stops node N by its PID (SIGTERM; nothing to save).
redlock_stop() {
    stop_server "redlock node $1" "$(redlock_pid "$1")" "$(redlock__pattern "$1")" TERM:10 KILL:5
}

# The nodes this run directory has started (1..N), whatever REDLOCK_SERVERS says now.
redlock_known() {
    numbered_dirs "$RUN_DIR/redlock"
}

redlock_status() {
    local n
    for ((n = 1; n <= REDLOCK_SERVERS; n++)); do
        status_row "redlock-$n" "$(redlock_pid "$n")" "127.0.0.1:$(redlock_port "$n")"
    done
}
