# ceiling.sh - the serial ceiling a row's throughput is read against (sourced, bash).
# shellcheck shell=bash
# shellcheck disable=SC2034 # CEILING_NOTE is for the caller
#
# The ceiling of a mode is what one client gets from the service's own deduction in a loop,
# with no HTTP (build/ceiling-bench): the rate a lock that lets one sale in at a time cannot
# beat. A lone client's ping-pong with PostgreSQL and Redis is at the mercy of whatever else
# the machine runs, so a tool measures it twice, before its rows and after them, and keeps
# the higher figure: a passing burst of other work then makes the fractions look worse,
# never better. It runs on a goods of its own (CEILING_GOODS, 999999), so that the books of
# the rows stay there to be looked at.
#
# A load tool reads each row against the ceiling measured just before and just after that
# row's own runs (measure_row, MEASURE_CEILING_MODE): the machine is shared, and its load
# moves within minutes (measured: the same ceiling at 100 and at 747 req/s four minutes
# apart), so a ceiling taken at the start and the end of a whole run pairs a row with
# whatever the machine did then, and two tools whose rows sit differently in their runs
# would read the same throughput against different ceilings.
#
# The benchmark reads the service's own variables (DATABASE_URL, REDIS_HOST, REDIS_PORT,
# ETCD_ENDPOINT, ZOOKEEPER_HOSTS); the caller exports them for its stack.

: "${CEILING_SECONDS:=3}" # each measurement, per mode
declare -gA CEILING=()      # mode -> the higher req/s measured so far
declare -gA CEILING_LAST=() # mode -> the req/s of the last measurement
CEILING_NOTE=''        # why the benchmark exited non-zero, when it did (its figures stand)

# ceiling_measure PREFIX MODES SECONDS: runs CEILING_BENCH (build/ceiling-bench) for the
# comma-separated MODES, SECONDS each, its output in PREFIX.out and PREFIX.err, sets
# CEILING_LAST[mode] to each mode's figure and keeps in CEILING[mode] the higher of that
# figure and the one it held. Exit status 1 with
# CEILING lines means some deductions failed: the figures stand, and CEILING_NOTE says why.
# Returns 1 (and prints why on stderr) when it measured nothing.
ceiling_measure() {
    local prefix=$1 modes=$2 seconds=$3 m rate
    CEILING_NOTE=''
    "${CEILING_BENCH:?}" --modes "$modes" --seconds "$seconds" \
        --goods-id "${CEILING_GOODS:-999999}" >"$prefix.out" 2>"$prefix.err" ||
        CEILING_NOTE=$(tail -n 1 "$prefix.err")
    if ! grep -q '^CEILING ' "$prefix.out"; then
        echo "ceiling-bench measured nothing: $(tail -n 3 "$prefix.err")" >&2
        return 1
    fi
    while read -r _ m _ _ rate _; do
        m=${m#mode=} rate=${rate#per_sec=}
        CEILING_LAST[$m]=$rate
        if [ -z "${CEILING[$m]:-}" ] || awk "BEGIN { exit !($rate > ${CEILING[$m]}) }"; then
            CEILING[$m]=$rate
        fi
    done < <(grep '^CEILING ' "$prefix.out")
}
