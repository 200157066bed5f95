# stack.sh - a load tool's own stack, through scripts/stack.sh (sourced, bash).
# shellcheck shell=bash
#
# Every tool that starts a stack of its own (ladder, chaos, scale) gives it its own RUN_DIR
# and ports in the environment (scripts/stack.sh reads them), keeps the output of every
# stack.sh command in a log of its run, and shows the end of that log when a start fails.
# These are those steps. The caller exports the stack's variables before calling.

STACK_SH=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/stack.sh

# stack_run LOG ARG...: scripts/stack.sh ARG... (replica-start 2, pg-freeze, ...), its output
# appended to LOG. Returns its status.
stack_run() {
    local log=$1
    shift
    "$STACK_SH" "$@" >>"$log" 2>&1
}

# stack_up LOG [VAR=VALUE...]: scripts/stack.sh up, with VAR=VALUE added to the environment
# (REPLICAS=2, FAULTS=on, ...), its output appended to LOG. When it fails: the last 20 lines
# of LOG on stderr, and status 1.
stack_up() {
    local log=$1
    shift
    env "$@" "$STACK_SH" up >>"$log" 2>&1 && return 0
    tail -n 20 "$log" >&2
    return 1
}

# stack_down LOG: scripts/stack.sh down (everything of RUN_DIR, by PID), its output appended
# to LOG. Returns its status.
stack_down() {
    "$STACK_SH" down >>"$1" 2>&1
}

# stack_ready URL...: each base URL's GET /readyz answers with a 2xx within 5 s. Otherwise
# prints the first that did not on stderr and returns 1.
stack_ready() {
    local url
    for url in "$@"; do
        curl -sS --fail -m 5 -o /dev/null "$url/readyz" 2>/dev/null ||
            { echo "$url is not ready" >&2; return 1; }
    done
}

MODES_JSON="" # the stack's GET /api/modes: the caller reads it once the stack is up

# mode_safe MODE: "yes" or "no" as the stack's /api/modes marks MODE (its "safe"), the one
# place that says which modes are safe; "unknown" when it does not list MODE. One object of
# the "modes" array per line: the one whose "name" is exactly MODE.
mode_safe() {
    local obj
    obj=$(printf '%s' "$MODES_JSON" | tr '{' '\n' | grep -F "\"name\":\"$1\"" | head -1 || true)
    case $obj in
    *'"safe":true'*) echo yes ;;
    *'"safe":false'*) echo no ;;
    *) echo unknown ;;
    esac
}
