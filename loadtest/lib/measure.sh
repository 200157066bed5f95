# measure.sh - one way to measure a row's throughput, used by every load tool (sourced, bash).
# shellcheck shell=bash
#
# A figure quoted as "req/s" or "of the serial ceiling" must not depend on the tool that made
# it. So every tool measures a row the same way:
#   1. the row's goods reset to MEASURE_STOCK units, a stock no row sells out (a sold-out
#      goods answers 409 in a fraction of a sale's time, and a run that sells out measures
#      the mix of the two);
#   2. a warm-up of MEASURE_WARMUP_S seconds, the same mode, goods and connections, not
#      counted: the first second of a run pays for the connections (wrk's, nginx's
#      upstreams, the pools), the first scripts loaded into Redis and the lock's line formed;
#   3. the books settled (what the warm-up left in flight is written), then MEASURE_REPS
#      repetitions of MEASURE_SECONDS seconds each with MEASURE_CONNECTIONS connections over
#      MEASURE_THREADS wrk threads;
#   4. the row's figure is the median of the repetitions' req/s, reported with their spread
#      (min and max); its latencies are the median of the repetitions' p50, p90 and p99;
#   5. the machine's load average before the repetitions and its busy share of the cores
#      while they ran (loadtest/lib/machine.sh), because the machine is shared;
#   6. the serial ceiling the figure is read against (loadtest/lib/ceiling.sh) measured just
#      before the repetitions and just after them, the higher of the two: the row's own
#      window, whatever else the tool runs before or after it.
#
# The defaults live here and nowhere else; a tool may let its user override them (the
# environment variables of the same names, or its options), never restate them.
: "${MEASURE_CONNECTIONS:=64}"
: "${MEASURE_THREADS:=2}"
: "${MEASURE_WARMUP_S:=2}"
: "${MEASURE_REPS:=3}"
: "${MEASURE_SECONDS:=5}"
: "${MEASURE_STOCK:=10000000}"
# A request may wait LOCK_WAIT_MS (2 s by default) for its lock: wrk must not cut it first.
MEASURE_WRK_TIMEOUT=10s
# A budget run that has not finished by then is stopped and reported.
MEASURE_BUDGET_CAP_S=180

# The wrk that runs now, for the tool's cleanup trap (kill it when the tool is interrupted).
MEASURE_WRK_PID=

# measure_check: returns 1, saying why on stderr, when a MEASURE_* setting is not a whole
# number in its range (threads >= 1, connections a multiple of threads: wrk gives each thread
# connections/threads, rounded down; reps and seconds >= 1).
measure_check() {
    local v
    for v in MEASURE_CONNECTIONS MEASURE_THREADS MEASURE_WARMUP_S MEASURE_REPS MEASURE_SECONDS \
        MEASURE_STOCK; do
        [[ ${!v} =~ ^[0-9]+$ ]] || { echo "$v must be a whole number, got '${!v}'" >&2; return 1; }
    done
    ((MEASURE_THREADS >= 1 && MEASURE_CONNECTIONS >= MEASURE_THREADS &&
        MEASURE_CONNECTIONS % MEASURE_THREADS == 0)) ||
        { echo "MEASURE_CONNECTIONS ($MEASURE_CONNECTIONS) must be a multiple of MEASURE_THREADS ($MEASURE_THREADS) >= 1" >&2; return 1; }
    ((MEASURE_REPS >= 1 && MEASURE_SECONDS >= 1)) ||
        { echo "MEASURE_REPS and MEASURE_SECONDS must be at least 1" >&2; return 1; }
}

# measure_wrk PREFIX URL SCRIPT CONNECTIONS THREADS SECONDS BUDGET [LUA_ARG...]: one wrk run
# of SCRIPT (loadtest/deduct.lua or order.lua) against URL, its output in PREFIX.out and
# PREFIX.err. BUDGET 0: for SECONDS. BUDGET N: until N requests are answered (the script
# says on stderr when each thread has spent its share; once all have, SIGINT tells wrk to
# stop and report; MEASURE_BUDGET_CAP_S at most). Returns 1, saying why on stderr, when wrk
# failed or printed no RESULT line.
measure_wrk() {
    local prefix=$1 url=$2 script=$3 conns=$4 threads=$5 seconds=$6 budget=$7 done_threads
    shift 7
    local args=("$@" threads="$threads")
    if [ "$budget" -gt 0 ]; then
        seconds=$MEASURE_BUDGET_CAP_S
        args+=(budget="$budget")
    fi
    "${WRK:-wrk}" -t "$threads" -c "$conns" -d "${seconds}s" --timeout "$MEASURE_WRK_TIMEOUT" \
        -s "$script" "$url" -- "${args[@]}" >"$prefix.out" 2>"$prefix.err" &
    MEASURE_WRK_PID=$!
    if [ "$budget" -gt 0 ]; then
        while kill -0 "$MEASURE_WRK_PID" 2>/dev/null; do
            done_threads=$(grep -c 'spent its budget' "$prefix.err" 2>/dev/null) || done_threads=0
            if [ "$done_threads" -ge "$threads" ]; then
                kill -INT "$MEASURE_WRK_PID" 2>/dev/null || true
                break
            fi
            sleep 0.05
        done
    fi
    if ! wait "$MEASURE_WRK_PID"; then
        MEASURE_WRK_PID=
        echo "wrk failed: $(tail -n 3 "$prefix.err")" >&2
        return 1
    fi
    MEASURE_WRK_PID=
    grep -q '^RESULT ' "$prefix.out" ||
        { echo "wrk printed no RESULT line (see $prefix.out, $prefix.err)" >&2; return 1; }
}

# measure_result FILE: sets the associative array MEASURE_R from the first RESULT line of
# FILE (deduct.lua's summary: requests, s200, rps, p50_ms, ... see its header), and from its
# MEASURE and CEILING_ROW lines when it has them (measure_row's: rps_min, rps_max, reps, ...,
# ceiling).
measure_result() {
    local kv
    declare -gA MEASURE_R=()
    for kv in $(grep -m 1 '^RESULT ' "$1") $(grep -m 1 '^MEASURE ' "$1" || true) \
        $(grep -m 1 '^CEILING_ROW ' "$1" || true); do
        [[ $kv == *=* ]] && MEASURE_R[${kv%%=*}]=${kv#*=}
    done
}

# measure_median V...: prints the median of the numbers given (the mean of the middle two
# for an even count).
measure_median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
        END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# measure_row PREFIX BASE PATH MODE GOODS GOODS_COUNT [LUA_ARG...]: the row measurement
# described at the top of this file, against BASE (nginx's or one replica's URL) PATH
# (/api/deduct) in MODE on goods GOODS .. GOODS+GOODS_COUNT-1, with loadtest/deduct.lua
# (LUA_ARGs are passed on to it, e.g. count=2). Each repetition's output is PREFIX.rK.out,
# the warm-up's PREFIX.warmup.out; PREFIX.out gets one RESULT line in deduct.lua's format
# for the whole row (the counts summed over the repetitions, seconds their sum, rps the
# median, the latencies the medians, max_ms the highest) and one MEASURE line:
#   MEASURE reps=R rep_seconds=D warmup_s=W connections=C threads=T rps_min=.. rps_max=..
#           load1=.. busy=..
# Hooks, when set (a function or command name; they run in this shell):
#   MEASURE_ON_START PREFIX   after the warm-up settled, just before the repetitions (a
#                             tool that records a history resets the goods again there and
#                             opens its history; loadtest/scale samples its counters);
#   MEASURE_ON_STOP PREFIX    just after the last repetition, before the books settle;
#   MEASURE_CEILING_MODE M    measure the serial ceiling of mode M (ceiling_measure,
#                             CEILING_SECONDS) just before the repetitions (before
#                             MEASURE_ON_START) and just after them (after MEASURE_ON_STOP);
#                             the MEASURE line then has ceiling= (the higher),
#                             ceiling_before= and ceiling_after=;
#   MEASURE_HISTORY DIR       record every repetition's history into DIR/wrk-rK.<thread>.jsonl
#                             (deduct.lua history=), ids from MEASURE_ID_PREFIX and K, each
#                             repetition's processes from K * 10^8 (process_base=).
# Returns 1, saying why on stderr, when a reset, a wrk run or a hook failed.
measure_row() {
    local prefix=$1 base=$2 path=$3 mode=$4 goods=$5 count=$6 k t0 t1 load1 busy
    shift 6
    local lua=(mode="$mode" goods="$goods" goods_count="$count" "$@") rep_args
    local script=${MEASURE_SCRIPT:-$(dirname "${BASH_SOURCE[0]}")/../deduct.lua}
    books_reset "$base" "$MEASURE_STOCK" "$goods" "$count" || return 1
    if [ "$MEASURE_WARMUP_S" -gt 0 ]; then
        measure_wrk "$prefix.warmup" "$base$path" "$script" "$MEASURE_CONNECTIONS" \
            "$MEASURE_THREADS" "$MEASURE_WARMUP_S" 0 "${lua[@]}" || return 1
        # What the warm-up left in flight is written before the counted repetitions start.
        books_settle 0.3 100 "$base" "$goods" "$count" ||
            { echo "the books were still changing after the warm-up" >&2; return 1; }
    fi
    local cmode=${MEASURE_CEILING_MODE:-} c_before='' c_after=''
    if [ -n "$cmode" ]; then
        ceiling_measure "$prefix.ceiling-before" "$cmode" "$CEILING_SECONDS" || return 1
        c_before=${CEILING_LAST[$cmode]:-}
    fi
    [ -z "${MEASURE_ON_START:-}" ] || $MEASURE_ON_START "$prefix" || return 1
    load1=$(machine_load1)
    t0=$(machine_ticks)
    for ((k = 1; k <= MEASURE_REPS; k++)); do
        rep_args=()
        [ -z "${MEASURE_HISTORY:-}" ] || rep_args=(history="$MEASURE_HISTORY/wrk-r$k"
            id_prefix="${MEASURE_ID_PREFIX:?}$k" process_base=$((k * 100000000)))
        measure_wrk "$prefix.r$k" "$base$path" "$script" "$MEASURE_CONNECTIONS" \
            "$MEASURE_THREADS" "$MEASURE_SECONDS" 0 "${lua[@]}" "${rep_args[@]}" || return 1
    done
    t1=$(machine_ticks)
    busy=$(machine_busy "$t0" "$t1")
    [ -z "${MEASURE_ON_STOP:-}" ] || $MEASURE_ON_STOP "$prefix" || return 1
    if [ -n "$cmode" ]; then
        ceiling_measure "$prefix.ceiling-after" "$cmode" "$CEILING_SECONDS" || return 1
        c_after=${CEILING_LAST[$cmode]:-}
    fi
    measure_combine "$prefix" "$MEASURE_REPS" "$load1" "$busy" || return 1
    [ -z "$cmode" ] || awk -v a="$c_before" -v b="$c_after" 'BEGIN {
        printf "CEILING_ROW ceiling=%.1f ceiling_before=%.1f ceiling_after=%.1f\n", (a > b ? a : b), a, b }' >>"$prefix.out"
}

# measure_combine PREFIX REPS LOAD1 BUSY: PREFIX.out from the RESULT lines of PREFIX.r1.out ..
# PREFIX.rREPS.out (measure_row's last step; no process but awk and sort): one RESULT line
# in deduct.lua's format for the whole row (the counts summed, seconds summed, rps the
# median of the runs' rps, each pNN_ms the median of the runs', max_ms the highest) and the
# MEASURE line measure_row's header describes (LOAD1 and BUSY as given). Returns 1 when a
# run's RESULT line is missing.
measure_combine() {
    local prefix=$1 reps=$2 load1=$3 busy=$4 k rps=()
    for ((k = 1; k <= reps; k++)); do
        grep -q '^RESULT ' "$prefix.r$k.out" 2>/dev/null ||
            { echo "no RESULT line in $prefix.r$k.out" >&2; return 1; }
        measure_result "$prefix.r$k.out"
        rps+=("${MEASURE_R[rps]}")
    done
    {
        for ((k = 1; k <= reps; k++)); do grep -m 1 '^RESULT ' "$prefix.r$k.out"; done |
            awk -v median_rps="$(measure_median "${rps[@]}")" '
            function median(a, n,    i, j, t) {
                for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            { n++; for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1], n] = kv[2]; if (n == 1) keys[++nk] = kv[1] } }
            END {
                line = "RESULT"
                for (i = 1; i <= nk; i++) {
                    k = keys[i]
                    if (k == "rps") { line = line sprintf(" rps=%.1f", median_rps); continue }
                    if (k ~ /^p[0-9]+_ms$/) {
                        for (r = 1; r <= n; r++) a[r] = v[k, r] + 0
                        line = line sprintf(" %s=%.3f", k, median(a, n)); continue
                    }
                    s = 0
                    for (r = 1; r <= n; r++) {
                        if (k == "max_ms" || k == "threads") { if (v[k, r] + 0 > s) s = v[k, r] + 0 }
                        else s += v[k, r]
                    }
                    line = line (k == "seconds" || k == "max_ms" ? sprintf(" %s=%.3f", k, s) : sprintf(" %s=%d", k, s))
                }
                print line
            }'
        printf 'MEASURE reps=%d rep_seconds=%d warmup_s=%d connections=%d threads=%d rps_min=%.1f rps_max=%.1f load1=%s busy=%s\n' \
            "$reps" "$MEASURE_SECONDS" "$MEASURE_WARMUP_S" "$MEASURE_CONNECTIONS" \
            "$MEASURE_THREADS" "$(printf '%s\n' "${rps[@]}" | sort -g | head -n 1)" \
            "$(printf '%s\n' "${rps[@]}" | sort -g | tail -n 1)" "$load1" "$busy"
    } >"$prefix.out"
}

# measure_how: one sentence saying how measure_row measured, for a report's header.
measure_how() {
    echo "each row's req/s is the median of $MEASURE_REPS runs of $MEASURE_SECONDS s" \
        "(min-max beside it) with $MEASURE_CONNECTIONS connections ($MEASURE_THREADS wrk threads)" \
        "after a ${MEASURE_WARMUP_S} s warm-up that is not counted, on a stock of $MEASURE_STOCK" \
        "that never sells out; its latencies the median of the runs' own"
}
