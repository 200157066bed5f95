# tests/ladder.sh - the ladder's report as a test (sourced by tests/run-all.sh; bash).
#
# run_ladder BUILD_DIR runs loadtest/ladder --check against BUILD_DIR's stockd (the sanitizer
# build under make test), on a run directory and ports of its own, and counts one case per
# row of its table: each unsafe rung must show its flaw and each rung that fixes it must keep
# the books exact, every time (the scenarios hold and step their requests where a window must
# open, and time only the leases: nothing is left to chance); and each row's history must say
# so too: `no` (with its counterexample) for a row whose flaw broke the books, `yes` for every
# other, and the orders must match the answers (ledger ok). The checker build/check-history
# must be there for that: its absence is a failed case. Then: the replicas stopped with status
# 0 and their logs hold no sanitizer report. The report itself
# is kept in the test logs (ladder/part-K/table.md).

# LADDER_PARTS (2): the ladder runs as that many parts side by side (loadtest/ladder --part
# K/N), each on a stack of its own: a row spends most of its time waiting for a lease or a
# pause to run out, so two parts take about half the time of one, on two cores. Each part's
# table and log are kept (ladder/part-K/table.md, ladder-K.log).
LADDER_PARTS=${LADDER_PARTS:-2}

run_ladder() {
    local build=$1 k dir out base rlbase relbase row log rows=0 want
    local -a ports dirs=() pids=()
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    out=$HARNESS_LOG_DIR/ladder
    check_group_begin "ladder"
    for ((k = 1; k <= LADDER_PARTS; k++)); do
        dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-ladder.XXXXXX")
        chmod 755 "$dir" # the postgres user must reach its data directory
        dirs+=("$dir")
        log=$HARNESS_LOG_DIR/ladder-$k.log
        mapfile -t ports < <(pick_free_ports 6) # nginx, PostgreSQL, Redis, etcd (2), ZooKeeper
        base=$(pick_port_block 3)
        rlbase=$(pick_port_block 5) # the 5 Redlock nodes
        relbase=$(pick_port_block 14) # the relays (Redlock nodes 4 and 5, svc-1 to Redis, svc-1 to Redlock nodes 2 to 5), their controls
        echo "(loadtest/ladder --check --part $k/$LADDER_PARTS: RUN_DIR=$dir, replicas :$base.., log $log)"
        LADDER_RUN_DIR=$dir LADDER_HTTP_PORT=${ports[0]} LADDER_PG_PORT=${ports[1]} \
            LADDER_REDIS_PORT=${ports[2]} LADDER_REPLICA_PORT_BASE=$base \
            LADDER_ETCD_PORT=${ports[3]} LADDER_ETCD_PEER_PORT=${ports[4]} LADDER_ZK_PORT=${ports[5]} \
            LADDER_REDLOCK_PORT_BASE=$rlbase LADDER_RELAY_PORT_BASE=$relbase \
            STOCKD=$build/stockd FAULT_RELAY=$build/fault-relay \
            CLOCK_SHIFT_LIB=$build/libclock-shift.so \
            CHECK_HISTORY=$build/check-history HISTORY_CLOCK=$build/history-clock \
            timeout --kill-after=10 360 loadtest/ladder --check --part "$k/$LADDER_PARTS" \
            --out "$out/part-$k" >"$log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}" || true
    check "a replica with FAULTS=on refuses an unknown fault with 400 and sells nothing" \
        grep -q '^ladder: contract: unknown fault refused' "$HARNESS_LOG_DIR/ladder-1.log"
    for ((k = 1; k <= LADDER_PARTS; k++)); do
        if [ ! -s "$out/part-$k/table.md" ]; then
            tail -20 "$HARNESS_LOG_DIR/ladder-$k.log" >&2
            check "loadtest/ladder --part $k/$LADDER_PARTS produced its table" false
            continue
        fi
        check "part $k: the rows' histories were checked (build/check-history is built)" \
            ladder__checked "$out/part-$k/table.md"
        while IFS= read -r row; do
            # | `rung` | scenario | answers | sold | taken | **oversold** | linearizable |
            #   ledger | expect, linearizable yes: yes |
            local rung scenario
            rung=$(echo "$row" | cut -d'|' -f2 | tr -d ' `')
            scenario=$(echo "$row" | cut -d'|' -f3 | sed 's/^ *//; s/ *$//')
            rows=$((rows + 1))
            check "$rung, $scenario: $(echo "$row" | awk -F'|' '{ print $(NF - 1) }' | sed 's/^ *//; s/ *$//')" \
                ladder__row_shown "$row"
            ladder__row_shown "$row" || harness_failure_detail "$row"
        done < <(grep '^| `' "$out/part-$k/table.md")
    done
    want=$(loadtest/ladder --list | wc -l)
    check "the parts ran every row of the ladder ($rows of $want)" test "$rows" = "$want"
    for ((k = 1; k <= LADDER_PARTS; k++)); do
        for n in 1 2 3; do
            check "ladder part $k: svc-$n stopped with status 0" ladder__exit_zero "${dirs[k - 1]}" "$n"
            check "ladder part $k: svc-$n log holds no sanitizer report" \
                it__no_sanitizer_report "${dirs[k - 1]}/logs/svc-$n.log"
        done
        rm -rf "${dirs[k - 1]}"
    done
    check_group_end
}

ladder__row_shown() {
    case $1 in
    *': yes |') return 0 ;;
    *)
        echo "    $1" >&2
        return 1
        ;;
    esac
}

# Every row's linearizable column holds a verdict, not "unchecked".
ladder__checked() {
    if grep '^| `' "$1" | grep -q '| unchecked'; then
        echo "    build/check-history missing: the histories are recorded but not checked" >&2
        return 1
    fi
}

ladder__exit_zero() {
    local rc=""
    [ -r "$1/replicas/svc-$2.exit" ] && read -r rc <"$1/replicas/svc-$2.exit"
    [ "$rc" = 0 ] || {
        echo "    svc-$2 exit status: ${rc:-none}" >&2
        return 1
    }
}
