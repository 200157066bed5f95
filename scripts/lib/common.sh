# common.sh - messages, and starting/stopping processes by PID (sourced, bash).
# shellcheck shell=bash
#
# Every server of the stack is stopped by the PID it recorded, never by name: other stacks
# (other users, other test runs) run the same programs on the same machine. Before a signal
# is sent, /proc/PID/cmdline is checked against what we started, so a stale PID file whose
# number was reused by an unrelated process never gets that process killed.

# Prints a message on stderr, prefixed with the script's name.
log() {
    echo "${LOG_PREFIX:-stack}: $*" >&2
}

# Prints an error on stderr and exits 1.
die() {
    log "error: $*"
    exit 1
}

# Prints the PID recorded in FILE (first line, digits only) or nothing.
pid_from_file() {
    local file=$1 pid=""
    if [ -r "$file" ]; then read -r pid <"$file" 2>/dev/null || true; fi
    case $pid in
    '' | *[!0-9]*) return 0 ;;
    esac
    echo "$pid"
}

# True when PID is a live process (not a zombie) whose command line contains PATTERN
# (a fixed string).
pid_matches() {
    local pid=$1 pattern=$2 state cmdline
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    # Field 3 of /proc/PID/stat is the state; Z is a zombie, that has exited already.
    state=$(sed "s/^.*) //" 2>/dev/null <"/proc/$pid/stat" | cut -d" " -f1) || return 1
    [ "$state" != "Z" ] && [ "$state" != "X" ] || return 1
    cmdline=$(tr "\\0" " " 2>/dev/null <"/proc/$pid/cmdline") || return 1
    [[ $cmdline == *"$pattern"* ]]
}

# True when the PID in FILE is alive and matches PATTERN; prints the PID.
pidfile_alive() {
    local file=$1 pattern=$2 pid
    pid=$(pid_from_file "$file")
    pid_matches "$pid" "$pattern" || return 1
    echo "$pid"
}

# Waits until PID is gone (or no longer matches PATTERN), at most SECONDS. Returns 1 on
# timeout.
wait_pid_gone() {
    local pid=$1 pattern=$2 seconds=$3 i
    for ((i = 0; i < seconds * 10; i++)); do
        pid_matches "$pid" "$pattern" || return 0
        sleep 0.1
    done
    pid_matches "$pid" "$pattern" && return 1
    return 0
}

# stop_pid NAME PID PATTERN SIGNAL:SECONDS...
# Sends each signal in turn to PID, while it still matches PATTERN, and waits up to SECONDS
# for it to exit, e.g. `TERM:30 KILL:5`. Returns 0 once it is gone, 1 if it outlived the last
# signal. A PID that does not match is treated as already stopped.
stop_pid() {
    local name=$1 pid=$2 pattern=$3 step sig secs
    shift 3
    for step in "$@"; do
        sig=${step%%:*}
        secs=${step#*:}
        pid_matches "$pid" "$pattern" || return 0
        [ "$sig" = "${1%%:*}" ] || log "$name (pid $pid) still running; sending SIG$sig"
        kill -s "$sig" "$pid" 2>/dev/null || true
        wait_pid_gone "$pid" "$pattern" "$secs" && return 0
    done
    log "$name (pid $pid) did not exit"
    return 1
}

# stop_server NAME PID PATTERN SIGNAL:SECONDS...: stop_pid, said in the log, for a server whose
# PID function printed PID; an empty PID (it printed none: the server is not running) is
# nothing to stop. Every server's `_stop` is this with its own signals.
stop_server() {
    [ -n "$2" ] || return 0
    log "stopping $1 (pid $2)"
    stop_pid "$@"
}

# status_row NAME PID WHERE [NOTE]: the line of `stack.sh status` for one server: running,
# with PID and WHERE (its address), when PID is not empty; stopped, with NOTE, otherwise.
status_row() {
    if [ -n "$2" ]; then
        printf '%-10s running  pid %s  %s\n' "$1" "$2" "$3"
    else
        printf '%-10s stopped%s\n' "$1" "${4:+  $4}"
    fi
}

# numbered_dirs DIR: the names of DIR's subdirectories named by a number (1, 2, ...), one a
# line: the nodes a run directory has started, whatever the settings say now.
numbered_dirs() {
    local d
    for d in "$1"/*/; do
        [ -d "$d" ] || continue
        d=${d%/}
        d=${d##*/}
        [[ $d =~ ^[0-9]+$ ]] && echo "$d"
    done
    return 0
}

# wait_until SECONDS COMMAND...: runs COMMAND every 0.2 s until it succeeds; 1 on timeout.
wait_until() {
    local seconds=$1 i
    shift
    for ((i = 0; i < seconds * 5; i++)); do
        "$@" && return 0
        sleep 0.2
    done
    "$@"
}

# Runs a command as the unprivileged user a server must run as: `postgres` when we are root
# (PostgreSQL refuses to run as root), ourselves otherwise.
as_user() {
    local user=$1
    shift
    if [ "$(id -u)" -eq 0 ] && [ "$user" != root ]; then
        runuser -u "$user" -- "$@"
    else
        "$@"
    fi
}

# Tail of a log file, indented, for an error message.
log_tail() {
    local file=$1 lines=${2:-20}
    [ -r "$file" ] || return 0
    echo "---- last lines of $file ----" >&2
    tail -n "$lines" "$file" | sed 's/^/    /' >&2
    echo "----" >&2
}
