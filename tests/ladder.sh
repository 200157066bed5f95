# tests/ladder.sh - the ladder's report as a test (sourced by tests/run-all.sh; bash).
#
# run_ladder BUILD_DIR runs loadtest/ladder --check against BUILD_DIR's stockd (the sanitizer
# build under make test), on a run directory and ports of its own, and counts one case per
# row of its table: each unsafe rung must show its flaw and each rung that fixes it must keep
# the books exact, every time (the scenarios are timed, not left to chance); and each row's
# history must say so too: `no` (with its counterexample) for a row whose flaw broke the
# books, `yes` for every other, and the orders must match the answers (ledger ok). The
# checker build/check-history must be there for that: its absence is a failed case. Then: the
# replicas stopped with status 0 and their logs hold no sanitizer report. The report itself
# is kept in the test logs (ladder/table.md).

run_ladder() {
    local build=$1 dir out base rlbase row log
    local -a ports
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-ladder.XXXXXX")
    chmod 755 "$dir" # the postgres user must reach its data directory
    out=$HARNESS_LOG_DIR/ladder
    log=$HARNESS_LOG_DIR/ladder.log
    mapfile -t ports < <(pick_free_ports 3)
    base=$(pick_port_block 3)
    rlbase=$(pick_port_block 5) # the 5 Redlock nodes

    check_group_begin "ladder"
    echo "(loadtest/ladder --check: RUN_DIR=$dir, replicas :$base.., log $log)"
    LADDER_RUN_DIR=$dir LADDER_HTTP_PORT=${ports[0]} LADDER_PG_PORT=${ports[1]} \
        LADDER_REDIS_PORT=${ports[2]} LADDER_REPLICA_PORT_BASE=$base \
        LADDER_REDLOCK_PORT_BASE=$rlbase STOCKD=$build/stockd \
        CHECK_HISTORY=$build/check-history HISTORY_CLOCK=$build/history-clock \
        timeout --kill-after=10 360 loadtest/ladder --check --out "$out" >"$log" 2>&1 || true
    if [ ! -s "$out/table.md" ]; then
        tail -20 "$log" >&2
        check "loadtest/ladder produced its table" false
    else
        check "a replica with FAULTS=on refuses an unknown fault with 400 and sells nothing" \
            grep -q '^ladder: contract: unknown fault refused' "$log"
        check "the rows' histories were checked (build/check-history is built)" \
            ladder__checked "$out/table.md"
        while IFS= read -r row; do
            # | `rung` | scenario | answers | sold | taken | **oversold** | linearizable |
            #   ledger | expect, linearizable yes: yes |
            local rung scenario
            rung=$(echo "$row" | cut -d'|' -f2 | tr -d ' `')
            scenario=$(echo "$row" | cut -d'|' -f3 | sed 's/^ *//; s/ *$//')
            check "$rung, $scenario: $(echo "$row" | awk -F'|' '{ print $(NF - 1) }' | sed 's/^ *//; s/ *$//')" \
                ladder__row_shown "$row"
        done < <(grep '^| `' "$out/table.md")
    fi
    for n in 1 2 3; do
        check "ladder svc-$n stopped with status 0" ladder__exit_zero "$dir" "$n"
        check "ladder svc-$n log holds no sanitizer report" \
            it__no_sanitizer_report "$dir/logs/svc-$n.log"
    done
    check_group_end
    rm -rf "$dir"
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
