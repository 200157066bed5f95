# harness.sh - runs test suites and counts their cases (sourced, bash).
# shellcheck shell=bash
#
# A suite is a program: a cmocka test binary, or a shell check. Its output is shown as it
# runs and kept in $HARNESS_LOG_DIR/<suite>.log. The cases are counted from cmocka's own
# summary lines ("[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s)", summed over the
# groups of a binary). A suite that exits non-zero without a failed case (a crash, a
# sanitizer report at exit, a timeout) counts as one failed case more: a broken run must
# never look like a pass. harness_summary prints one line per suite and, last, exactly
# "N passed, N failed"; before it, each failed case by name, with what it said (a run's
# printed output may be all a reader of a remote run gets: the case must be named there).

HARNESS_PASSED=0
HARNESS_FAILED=0
HARNESS_RESULTS=()
HARNESS_FAILURES=()

# Sanitizer settings for every suite: leaks are failures, reports carry stack traces.
# (detect_leaks is on by default on x86-64 Linux; it is spelled out as it is a claim.)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# A leak inside a library that the project cannot free, each entry with its reason.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# cmocka's default output is the one we count from.
unset CMOCKA_MESSAGE_OUTPUT CMOCKA_XML_FILE

# Clean-up actions, run in reverse order at exit (normal or not): each suite that starts a
# server registers how to stop it, and a failure anywhere still stops everything.
HARNESS_CLEANUPS=()

harness_on_exit() {
    HARNESS_CLEANUPS+=("$1")
}

harness__cleanup() {
    local i
    for ((i = ${#HARNESS_CLEANUPS[@]} - 1; i >= 0; i--)); do
        eval "${HARNESS_CLEANUPS[$i]}" || true
    done
    HARNESS_CLEANUPS=()
}

harness_init() {
    trap harness__cleanup EXIT
    # A signal ends the run through the EXIT trap (with the usual 128+N status).
    trap 'exit 130' INT
    trap 'exit 143' TERM
    HARNESS_LOG_DIR=${HARNESS_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/stock-tests.XXXXXX")}
    mkdir -p "$HARNESS_LOG_DIR"
    # Every port picked in this run is remembered, so no two servers are given the same one
    # (scripts/lib/ports.sh).
    export PICKED_PORTS_FILE=$HARNESS_LOG_DIR/picked-ports
    : >"$PICKED_PORTS_FILE"
}

# harness__record NAME PASSED FAILED NOTE
harness__record() {
    local name=$1 passed=$2 failed=$3 note=$4 line
    HARNESS_PASSED=$((HARNESS_PASSED + passed))
    HARNESS_FAILED=$((HARNESS_FAILED + failed))
    line=$(printf '%-26s %4d passed %4d failed  %s' "$name" "$passed" "$failed" "$note")
    HARNESS_RESULTS+=("$line")
    echo "== $line"
}

# --- CPU accounting (HARNESS_CPU=1, root on a machine with cgroup v1's cpuacct) ---
#
# The run's time budget is set by CPU, not by waiting: on two cores, the suites that drive
# load keep both busy. To see which suite costs what, each lane can run in a cpuacct cgroup
# of its own, whose counter takes in every process the lane starts (its servers too, as
# they stay in their parent's group), and each suite's line then says the CPU-seconds it
# used beside its wall-clock seconds. Off by default: it needs root and cgroup v1, and it is
# a measuring aid, not a test.
HARNESS_CPU_GROUP=""

harness__cpu_join() {
    local root=/sys/fs/cgroup/cpuacct group
    [ "${HARNESS_CPU:-0}" = 1 ] && [ -w "$root/cgroup.procs" ] || return 0
    group=$root/stock-tests-$BASHPID
    mkdir -p "$group" && echo "$BASHPID" >"$group/cgroup.procs" || return 0
    HARNESS_CPU_GROUP=$group
}

# The lane's CPU-seconds so far (with one decimal), or nothing when not accounted.
harness__cpu_now() {
    [ -n "$HARNESS_CPU_GROUP" ] || return 0
    awk '{ printf "%.1f", $1 / 1e9 }' "$HARNESS_CPU_GROUP/cpuacct.usage"
}

# harness__cpu_note START: ", N cpu-s" since START (harness__cpu_now's), or nothing.
harness__cpu_note() {
    [ -n "$HARNESS_CPU_GROUP" ] && [ -n "$1" ] || return 0
    awk -v a="$1" -v b="$(harness__cpu_now)" 'BEGIN { printf ", %.1f cpu-s", b - a }'
}

harness__cpu_leave() {
    [ -n "$HARNESS_CPU_GROUP" ] || return 0
    echo "== lane CPU: $(harness__cpu_now) cpu-s"
    echo "$BASHPID" >/sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null || true
    rmdir "$HARNESS_CPU_GROUP" 2>/dev/null || true
    HARNESS_CPU_GROUP=""
}

# run_suite NAME SECONDS COMMAND...: runs a cmocka binary (or any command printing cmocka's
# summary lines) with a time limit, and records its counts.
run_suite() {
    local name=$1 seconds=$2 log rc passed failed start elapsed note why cpu0
    shift 2
    log=$HARNESS_LOG_DIR/${name//[^A-Za-z0-9_.+-]/_}.log # a pattern in the name: no * in file names
    echo
    echo "== $name: $*"
    start=$(date +%s)
    cpu0=$(harness__cpu_now)
    set +e
    # --kill-after: a suite that ignores SIGTERM still ends. --foreground keeps the suite in
    # our process group, so a Ctrl-C reaches it (and then our INT trap cleans up) instead of
    # waiting for it to finish.
    timeout --foreground --kill-after=10 "$seconds" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    elapsed=$(($(date +%s) - start))
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test(s)\..*/\1/p' "$log" |
        awk '{ s += $1 } END { print s + 0 }')
    failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s).*/\1/p' "$log" |
        awk '{ s += $1 } END { print s + 0 }')
    note="(${elapsed}s$(harness__cpu_note "$cpu0"))"
    why=""
    harness__failed_cmocka_cases "$name" "$log"
    if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
        case $rc in
        124 | 137) why="TIMED OUT after ${seconds}s" ;;
        *) why="exited with status $rc (crash or sanitizer report? see $log)" ;;
        esac
    elif [ "$rc" -eq 0 ] && [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
        # Ran, said nothing countable: a test binary that runs no case is a failure too.
        why="ran no test case"
    fi
    if [ -n "$why" ]; then
        failed=1
        note="(${elapsed}s) $why"
        HARNESS_FAILURES+=("$name: $why")
    fi
    harness__record "$name" "$passed" "$failed" "$note"
}

# harness__failed_cmocka_cases SUITE LOG: each case a cmocka log says failed, with the lines
# cmocka printed for it ("[  ERROR   ]", "[   LINE   ]"), into HARNESS_FAILURES.
harness__failed_cmocka_cases() {
    local line
    while IFS= read -r line; do
        HARNESS_FAILURES+=("$1: $line")
    done < <(awk '
        /^\[ RUN      \] / { name = $4; why = "" }
        /^\[  ERROR   \] --- / { sub(/^\[  ERROR   \] --- /, ""); why = why (why == "" ? "" : "; ") $0 }
        /^\[   LINE   \] --- / { sub(/^\[   LINE   \] --- /, ""); sub(/: error: Failure!$/, ""); why = why (why == "" ? "" : " at ") $0 }
        /^\[  FAILED  \] [A-Za-z_]/ && name != "" && $4 == name { print name (why == "" ? "" : " (" why ")"); name = "" }
    ' "$2")
}

# harness_failure_detail TEXT: adds TEXT under the last failed case of the summary's list
# (what a failed check saw, when its name alone does not say it).
harness_failure_detail() {
    HARNESS_FAILURES+=("    $1")
}

# run_program_dir DIR SECONDS [SUFFIX]: runs each program DIR/test_* (a folder of programs
# by concern, BUILD_DIR/tests/lock/ say) as a suite of its own, named FOLDER/PROGRAM (then
# SUFFIX: lock/test_lease-tsan), each with a limit of SECONDS. A folder without a program
# is a broken suite: a run that finds nothing to run must not look like a pass.
run_program_dir() {
    local dir=$1 seconds=$2 suffix=${3:-} bin found=0
    for bin in "$dir"/test_*; do
        if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then continue; fi
        found=1
        run_suite "${dir##*/}/${bin##*/}$suffix" "$seconds" "$bin"
    done
    [ $found -eq 1 ] || suite_broken "${dir##*/}$suffix" "no test programs in $dir (make B=... tests)"
}

# check NAME COMMAND...: one shell-level case (a static check, an assertion on a log).
# Counted in the current check group (check_group_begin/end).
HARNESS_GROUP=""
HARNESS_GROUP_PASSED=0
HARNESS_GROUP_FAILED=0
HARNESS_GROUP_STARTED=0
HARNESS_GROUP_CPU=""

check_group_begin() {
    HARNESS_GROUP=$1
    HARNESS_GROUP_PASSED=0
    HARNESS_GROUP_FAILED=0
    HARNESS_GROUP_STARTED=$(date +%s)
    HARNESS_GROUP_CPU=$(harness__cpu_now)
    echo
    echo "== $HARNESS_GROUP"
}

check() {
    local what=$1
    shift
    if "$@"; then
        echo "[       OK ] $what"
        HARNESS_GROUP_PASSED=$((HARNESS_GROUP_PASSED + 1))
    else
        echo "[  FAILED  ] $what"
        HARNESS_GROUP_FAILED=$((HARNESS_GROUP_FAILED + 1))
        HARNESS_FAILURES+=("$HARNESS_GROUP: $what")
    fi
}

check_group_end() {
    harness__record "$HARNESS_GROUP" "$HARNESS_GROUP_PASSED" "$HARNESS_GROUP_FAILED" \
        "($(($(date +%s) - HARNESS_GROUP_STARTED))s$(harness__cpu_note "$HARNESS_GROUP_CPU"))"
}

# A suite that could not even run (its binary missing, its server not starting).
suite_broken() {
    local name=$1 why=$2
    echo
    echo "== $name: $why"
    harness__record "$name" 0 1 "NOT RUN: $why"
    HARNESS_FAILURES+=("$name: not run: $why")
}

# harness__fd_limit LIMIT: prints the open-file limit a run asking for LIMIT gets here, and
# says which on stderr. Where the soft limit is LIMIT or lower already, it stays (and the hard
# one comes down to it); where the hard limit is lower than LIMIT, it stays.
harness__fd_limit() {
    local limit=$1 soft hard
    soft=$(ulimit -Sn)
    hard=$(ulimit -Hn)
    if [ "$soft" != unlimited ] && ((soft <= limit)); then
        echo "== open-file limit $soft (soft and hard): this shell's own, already at most $limit" >&2
        limit=$soft
    elif [ "$hard" != unlimited ] && ((hard < limit)); then
        echo "== open-file limit $hard (soft and hard): the hard limit here, below the $limit wanted" >&2
        limit=$hard
    else
        echo "== open-file limit $limit (soft and hard), servers included (here otherwise: $soft/$hard)" >&2
    fi
    echo "$limit"
}

# --- lanes: groups of suites that run side by side ---
#
# Most of a run is waiting (for a lease to run out, a failover, a server to start), not
# computing: run one after the other, the suites leave the machine's cores idle for half the
# time. A lane is a group of suites that runs in order, in a background subshell of its own,
# beside the other lanes. Lanes share nothing but the log directory (each suite's log has its
# own name) and the file of picked ports (scripts/lib/ports.sh): every server a suite starts is
# on ports and in a directory of its own, so two lanes cannot meet.
#
# harness_lane NAME FD_LIMIT FUNCTION [ARGS...]: starts FUNCTION in a lane, under an open-file
# limit of FD_LIMIT, soft and hard (harness__fd_limit), which every server it starts inherits.
# The hard limit matters: a program may raise its own soft limit up to it (Redis does, for
# maxclients), so a test that depends on a higher one fails here and not on a user's machine.
# The lane's output goes to $HARNESS_LOG_DIR/lane-NAME.out; harness_lanes_wait prints it when
# the lane ends, and adds its counts to the run's.
HARNESS_LANE_PIDS=()
HARNESS_LANE_NAMES=()

harness_lane() {
    local name=$1 limit=$2 out state
    shift 2
    out=$HARNESS_LOG_DIR/lane-$name.out
    state=$HARNESS_LOG_DIR/lane-$name.state
    limit=$(harness__fd_limit "$limit" 2>>"$out")
    rm -f "$state"
    (
        ulimit -n "$limit" || exit 1
        harness__cpu_join
        HARNESS_PASSED=0 HARNESS_FAILED=0 HARNESS_SKIPPED=0
        HARNESS_RESULTS=() HARNESS_FAILURES=() HARNESS_CLEANUPS=() HARNESS_LANE_PIDS=()
        HARNESS_LANE_NAMES=()
        trap 'harness__cleanup; harness__cpu_leave' EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        "$@"
        harness__cleanup
        harness__cpu_leave
        # The counts and how many result lines follow; then the failed cases.
        {
            echo "$HARNESS_PASSED $HARNESS_FAILED ${HARNESS_SKIPPED:-0} ${#HARNESS_RESULTS[@]}"
            printf '%s\n' "${HARNESS_RESULTS[@]}"
            [ ${#HARNESS_FAILURES[@]} -eq 0 ] || printf '%s\n' "${HARNESS_FAILURES[@]}"
        } >"$state"
    ) >>"$out" 2>&1 </dev/null &
    HARNESS_LANE_PIDS+=($!)
    HARNESS_LANE_NAMES+=("$name")
    echo "== lane $name started: $* (output: $out)"
}

# harness__descendants PID: the PIDs of PID's children, grandchildren..., deepest first.
harness__descendants() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        harness__descendants "$child"
        echo "$child"
    done
}

# harness__stop_lanes: on an early exit (Ctrl-C, a signal), ends every lane still running:
# its suite's processes first, so that the lane's own clean-up (stopping its servers, by PID)
# runs now rather than when the suite's time limit ends; then waits for the lanes, bounded.
harness__stop_lanes() {
    local pid="" i
    [ ${#HARNESS_LANE_PIDS[@]} -gt 0 ] || return 0
    for pid in "${HARNESS_LANE_PIDS[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        kill -TERM "$pid" 2>/dev/null || true
        # shellcheck disable=SC2046 # a list of PIDs
        kill -TERM $(harness__descendants "$pid") 2>/dev/null || true
    done
    for ((i = 0; i < 60; i++)); do
        for pid in "${HARNESS_LANE_PIDS[@]}"; do
            kill -0 "$pid" 2>/dev/null && break
            pid=""
        done
        [ -n "$pid" ] || return 0
        sleep 1
    done
}

# harness_lanes_wait: waits for every lane started, printing each lane's output as it ends (in
# the order they end) and adding its counts and result lines to the run's. A lane that ended
# without its results (killed, or its subshell failed) counts as a failed suite.
harness_lanes_wait() {
    local pid name i state passed failed skipped nresults started=$SECONDS
    local -a results
    harness_on_exit harness__stop_lanes
    while [ ${#HARNESS_LANE_PIDS[@]} -gt 0 ]; do
        pid=""
        wait -n -p pid "${HARNESS_LANE_PIDS[@]}" || true
        [ -n "$pid" ] || break
        for i in "${!HARNESS_LANE_PIDS[@]}"; do
            [ "${HARNESS_LANE_PIDS[$i]}" = "$pid" ] || continue
            name=${HARNESS_LANE_NAMES[$i]}
            unset "HARNESS_LANE_PIDS[$i]" "HARNESS_LANE_NAMES[$i]"
        done
        HARNESS_LANE_PIDS=("${HARNESS_LANE_PIDS[@]}")
        HARNESS_LANE_NAMES=("${HARNESS_LANE_NAMES[@]}")
        echo
        echo "==================== lane $name ended ($((SECONDS - started)) s into the lanes) ===================="
        cat "$HARNESS_LOG_DIR/lane-$name.out"
        state=$HARNESS_LOG_DIR/lane-$name.state
        if [ -s "$state" ]; then
            { read -r passed failed skipped nresults; mapfile -t results; } <"$state"
            HARNESS_PASSED=$((HARNESS_PASSED + passed))
            HARNESS_FAILED=$((HARNESS_FAILED + failed))
            HARNESS_SKIPPED=$((${HARNESS_SKIPPED:-0} + skipped))
            HARNESS_RESULTS+=("${results[@]:0:nresults}")
            HARNESS_FAILURES+=("${results[@]:nresults}")
        else
            suite_broken "lane-$name" "the lane ended without its results (see above)"
        fi
    done
}

# Runs every pure unit test binary of BUILD_DIR/tests: all test_* but those that need
# servers (test_redlock: Redis; test_etcd: etcd; ...; the programs of tests/lock/ (Redis),
# tests/db/ and tests/deduct/ (PostgreSQL) and tests/stack/ (the whole stack) are in folders
# of their own and so not matched here).
run_unit_suites() {
    local build=$1 bin name found=0
    for bin in "$build"/tests/test_*; do
        if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then continue; fi
        name=${bin##*/}
        case $name in
        test_redlock | test_etcd | test_zookeeper | test_sentinel | test_cluster) continue ;;
        # The programs the folders replaced (tests/stack/, tests/lock/, tests/db/ and
        # tests/deduct/): a build directory made before may keep them.
        test_stack | test_lock | test_db | test_deduct) continue ;;
        esac
        found=1
        run_suite "$name" 120 "$bin"
    done
    # The committed histories (tests/histories/run.sh): check-history's verdict on each.
    if [ -x "$build/check-history" ]; then
        run_suite histories 180 tests/histories/run.sh "$build"
    else
        suite_broken histories "$build/check-history missing (make B=$build SAN=1 tests)"
    fi
    [ $found -eq 1 ] || suite_broken unit "no unit test binaries in $build/tests (make B=$build SAN=1 tests)"
}

# Prints the table and the final count; returns 1 when anything failed.
harness_summary() {
    local line
    echo
    echo "==================== results ===================="
    for line in "${HARNESS_RESULTS[@]}"; do
        echo "$line"
    done
    if [ ${#HARNESS_FAILURES[@]} -gt 0 ]; then
        echo "failed:"
        for line in "${HARNESS_FAILURES[@]:0:60}"; do
            echo "  $line"
        done
        [ ${#HARNESS_FAILURES[@]} -le 60 ] || echo "  ... and $((${#HARNESS_FAILURES[@]} - 60)) lines more"
    fi
    echo "(logs in $HARNESS_LOG_DIR)"
    if [ "${HARNESS_SKIPPED:-0}" -gt 0 ]; then
        echo "$HARNESS_PASSED passed, $HARNESS_FAILED failed, $HARNESS_SKIPPED skipped"
    else
        echo "$HARNESS_PASSED passed, $HARNESS_FAILED failed"
    fi
    [ "$HARNESS_FAILED" -eq 0 ]
}
