# replicas.sh - the stockd replicas svc-1..N (sourced, bash; needs common.sh, config.sh).
# shellcheck shell=bash
#
# Each replica runs under a small bash wrapper, started with `setsid -f` so it outlives
# stack.sh and no terminal signal (Ctrl-C, hang-up) reaches it. The wrapper records the
# replica's PID before exec'ing stockd, waits for it, then records its exit status: stockd is
# not our child once stack.sh has returned, so without the wrapper `down` could not tell a
# clean exit 0 from a crash or a sanitizer report.
#
#   $REPLICA_DIR/svc-N.pid    stockd's PID
#   $REPLICA_DIR/svc-N.exit   its exit status, once it has exited
#   $REPLICA_DIR/svc-N.port   the port it was started on
#   $LOG_DIR/svc-N.log        its stderr (the service logs there), appended across starts
#
# Replica N normally listens on REPLICA_PORT_BASE+N-1 and sits behind nginx (N from 1 to
# REPLICAS). An "extra" replica (N above REPLICAS, on a port of its own) is started the same
# way but nginx never sends it traffic: the tests use one, with settings of its own, to be
# talked to directly. Whatever its number, `down` stops it, by its recorded PID.

READY_TIMEOUT=${READY_TIMEOUT:-60}

# What replica N's command line contains: the binary it was started from (recorded at start,
# so that `down` finds a replica started with another STOCKD, e.g. the sanitizer build).
replica__pattern() {
    local bin=""
    [ -r "$REPLICA_DIR/svc-$1.bin" ] && read -r bin <"$REPLICA_DIR/svc-$1.bin"
    echo "${bin:-$STOCKD}"
}

# Prints replica N's PID when it runs (and is this run directory's svc-N), else returns 1.
replica_pid() {
    local n=$1 pid
    pid=$(pidfile_alive "$REPLICA_DIR/svc-$n.pid" "$(replica__pattern "$n")") || return 1
    # The binary may be shared with another stack: check it is our svc-N by its environment.
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "INSTANCE=svc-$n" || return 1
    echo "$pid"
}

# For wait_until: succeeds (printing the PID) once replica N runs, and also once it has
# exited (printing nothing), so that the caller stops waiting either way.
replica__started() {
    replica_pid "$1" || [ -s "$REPLICA_DIR/svc-$1.exit" ]
}

replica__ready() {
    curl -fsS -o /dev/null -m 2 "http://127.0.0.1:$1/readyz" 2>/dev/null
}

# Port of replica N: the one it was last started on (an extra replica has no other), else
# the one its number gives.
replica__port() {
    local port=""
    [ -r "$REPLICA_DIR/svc-$1.port" ] && read -r port <"$REPLICA_DIR/svc-$1.port"
    [[ $port =~ ^[0-9]+$ ]] || port=$(replica_port "$1")
    echo "$port"
}

# Applies the migrations once, before any replica starts (stockd migrate also takes an
# advisory lock, so replicas starting at once would be safe too).
replicas_migrate() {
    [ -x "$STOCKD" ] || die "$STOCKD not found or not executable: build it first (make)"
    mkdir -p "$LOG_DIR"
    if ! "$STOCKD" migrate >>"$LOG_DIR/migrate.log" 2>&1; then
        log_tail "$LOG_DIR/migrate.log"
        die "stockd migrate failed (see $LOG_DIR/migrate.log)"
    fi
}

# replica_start N [PORT]: starts replica N on PORT (default: the one its number gives) unless
# it runs already, with the environment of the caller. Does not wait for it to be ready.
replica_start() {
    local n=$1 port=${2:-} pid name=svc-$1 port_var="its PORT argument"
    if [ -z "$port" ]; then
        port=$(replica_port "$n")
        port_var=REPLICA_PORT_BASE
    fi
    if pid=$(replica_pid "$n"); then
        port=$(replica__port "$n")
        # A replica running a binary that has been rebuilt since it started would serve old
        # code behind a fresh `make`: restart it on the new one (on the same port).
        if [ "$STOCKD" -nt "$REPLICA_DIR/$name.pid" ]; then
            log "$name runs an older build of $STOCKD: restarting it"
            replicas_stop "$n" || true
            require_port_free "$port" "$name" "$port_var"
        else
            log "$name already running (pid $pid, port $port)"
            return 0
        fi
    fi
    [ -x "$STOCKD" ] || die "$STOCKD not found or not executable: build it first (make)"
    require_port_free "$port" "$name" "$port_var"
    mkdir -p "$REPLICA_DIR" "$LOG_DIR"
    rm -f "$REPLICA_DIR/$name.pid" "$REPLICA_DIR/$name.exit"
    echo "$STOCKD" >"$REPLICA_DIR/$name.bin"
    echo "$port" >"$REPLICA_DIR/$name.port"
    echo "---- $(date '+%F %T') stack: starting $name on 127.0.0.1:$port" >>"$LOG_DIR/$name.log"

    # The wrapper: the subshell writes its own PID ($BASHPID), then becomes stockd by exec, so
    # the recorded PID is stockd's. The subshell runs in the foreground of the wrapper, which
    # therefore does not set SIGINT/SIGQUIT to "ignored" as a background job would.
    # shellcheck disable=SC2016 # expanded by the wrapper, not here
    # REDIS_VIA ("N:PORT,..."): replica N reaches Redis at PORT, a relay in front of it (the
    # ladder's partition row cuts one replica off); its Redlock nodes likewise (REDLOCK_VIA's
    # "N/NODE:PORT", redlock_nodes_of).
    PORT=$port INSTANCE=$name REDIS_PORT=$(via_port "${REDIS_VIA:-}" "$n" "$REDIS_PORT") \
        REDLOCK_NODES=$(redlock_nodes_of "$n") \
        setsid -f bash -c '
        pidfile=$1 exitfile=$2 logfile=$3
        shift 3
        ( echo "$BASHPID" >"$pidfile"; exec "$@" ) </dev/null >>"$logfile" 2>&1
        rc=$?
        echo "$rc" >"$exitfile"
        echo "---- $(date "+%F %T") stack: exited with status $rc" >>"$logfile"
    ' stock-replica "$REPLICA_DIR/$name.pid" "$REPLICA_DIR/$name.exit" "$LOG_DIR/$name.log" \
        "$STOCKD" </dev/null >/dev/null 2>&1

    # Until exec has happened, the PID file names a bash, not stockd. An exit file means it
    # has come and gone already (bad configuration, say): no need to wait any longer.
    pid=$(wait_until 10 replica__started "$n") || true
    if [ -z "$pid" ]; then
        log_tail "$LOG_DIR/$name.log"
        port_explain "$port"
        die "$name did not start (exit status $(replica_exit_status "$n"); see $LOG_DIR/$name.log)"
    fi
    log "$name started (pid $pid, 127.0.0.1:$port)"
}

# Waits until replica N's /readyz answers 200; dies if it exits or takes over READY_TIMEOUT.
replica_wait_ready() {
    local n=$1 port i name=svc-$1
    port=$(replica__port "$n")
    for ((i = 0; i < READY_TIMEOUT * 5; i++)); do
        replica__ready "$port" && return 0
        if ! replica_pid "$n" >/dev/null; then
            log_tail "$LOG_DIR/$name.log"
            port_explain "$port"
            die "$name exited during start-up (status $(replica_exit_status "$n"))"
        fi
        sleep 0.2
    done
    log_tail "$LOG_DIR/$name.log"
    die "$name not ready after ${READY_TIMEOUT}s (GET http://127.0.0.1:$port/readyz)"
}

# Prints replica N's recorded exit status, or "unknown".
replica_exit_status() {
    local rc=""
    [ -r "$REPLICA_DIR/svc-$1.exit" ] && read -r rc <"$REPLICA_DIR/svc-$1.exit"
    echo "${rc:-unknown}"
}

# Stops replicas N... with SIGTERM (each stops accepting, finishes what is in flight,
# releases its locks and connections and exits 0), SIGKILL after 30 s. All get the signal
# first, then each is waited for, so one slow drain does not delay the others. Returns 1
# when one did not exit with status 0 (a crash, a sanitizer report, a kill), after saying so.
replicas_stop() {
    local n pid rc failed=0
    local -A pids=()
    for n in "$@"; do
        pid=$(replica_pid "$n") || continue
        log "stopping svc-$n (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        pids[$n]=$pid
    done
    for n in "${!pids[@]}"; do
        # TERM was sent above: wait for it, then escalate.
        if ! wait_pid_gone "${pids[$n]}" "$(replica__pattern "$n")" 30; then
            stop_pid "svc-$n" "${pids[$n]}" "$(replica__pattern "$n")" KILL:5 || true
        fi
        # The wrapper writes the status right after stockd exits.
        wait_until 5 test -s "$REPLICA_DIR/svc-$n.exit" || true
        rc=$(replica_exit_status "$n")
        if [ "$rc" != 0 ]; then
            log "svc-$n exited with status $rc (see $LOG_DIR/svc-$n.log)"
            failed=1
        fi
    done
    return $failed
}

# Numbers of the replicas that have a PID file in this run directory (whatever REPLICAS
# says now: `down` stops what `up` started).
replicas_known() {
    local f n
    for f in "$REPLICA_DIR"/svc-*.pid; do
        [ -e "$f" ] || continue
        n=${f##*/svc-}
        echo "${n%.pid}"
    done
}

replica_status() {
    local n=$1 pid port ready
    port=$(replica__port "$n")
    if pid=$(replica_pid "$n"); then
        replica__ready "$port" && ready=ready || ready="NOT ready"
        printf 'svc-%-6s running  pid %s  127.0.0.1:%s  %s\n' "$n" "$pid" "$port" "$ready"
    elif [ -s "$REPLICA_DIR/svc-$n.exit" ]; then
        printf 'svc-%-6s stopped  (last exit status %s)\n' "$n" "$(replica_exit_status "$n")"
    else
        printf 'svc-%-6s stopped\n' "$n"
    fi
}
