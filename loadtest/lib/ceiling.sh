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
# The benchmark reads the service's own variables (DATABASE_URL, REDIS_HOST, REDIS_PORT,
# ETCD_ENDPOINT, ZOOKEEPER_HOSTS); the caller exports them for its stack.

declare -gA CEILING=() # mode -> the higher req/s measured so far
CEILING_NOTE=''        # why the benchmark exited non-zero, when it did (its figures stand)

# ceiling_measure PREFIX MODES SECONDS: runs CEILING_BENCH (build/ceiling-bench) for the
# comma-separated MODES, SECONDS each, its output in PREFIX.out and PREFIX.err, and keeps in
# CEILING[mode] the higher of that mode's figure and the one it held. Exit status 1 with
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
        if [ -z "${CEILING[$m]:-}" ] || awk "BEGIN { exit !($rate > ${CEILING[$m]}) }"; then
            CEILING[$m]=$rate
        fi
    done < <(grep '^CEILING ' "$prefix.out")
}
