# tests/lab.sh - the lab as a test (sourced by tests/run-all.sh; bash).
#
# run_lab BUILD_DIR starts the lab's own stack (scripts/lab.sh up: FAULTS=on, the ladder's
# short leases, nginx with /lab/ and /replica/N/api/) from BUILD_DIR's stockd (the sanitizer
# build under make test) on a run directory and free ports of its own, then:
#   1. BUILD_DIR/tests/stack/test_lab_routes with LAB_FAULTS=on: the lab's contract through the API
#      alone (hold, list, step, trace, bad input; A held at checked past its lease on
#      setnx-ttl oversells 1, on redis the books stay exact);
#   2. tests/lab_page.mjs: headless Chromium plays every level of web/lab/ through its own
#      buttons, once on the rung with the flaw (won: the books or the answers show it) and
#      once on a rung that fixes it (refused, books exact), in one browser session; no
#      JavaScript error; one case per play; the won lease level's screenshot goes to the test
#      logs (lab-page.png);
#   3. scripts/lab.sh down: the replicas stopped with status 0 (svc-1 was ended on purpose by
#      the crash level and started again by the lab's watcher) and no log holds a sanitizer
#      report.
# Everything started is stopped, on failure too.

run_lab() {
    local build=$1 dir log base pg redis line rc
    local -a ports
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-lab.XXXXXX")
    chmod 755 "$dir" # the postgres user must reach its data directory
    log=$HARNESS_LOG_DIR/lab.log
    mapfile -t ports < <(pick_free_ports 2)
    pg=${ports[0]}
    redis=${ports[1]}
    base=$(pick_port_block 4) # nginx, then the three replicas
    LAB__ENV=(LAB_RUN_DIR="$dir" LAB_HTTP_PORT="$base" LAB_PG_PORT="$pg" LAB_REDIS_PORT="$redis"
        STOCKD="$build/stockd")
    harness_on_exit lab__down

    check_group_begin "lab"
    echo "(scripts/lab.sh up: RUN_DIR=$dir, nginx :$base, replicas :$((base + 1)).., log $log)"
    if ! env "${LAB__ENV[@]}" timeout --kill-after=10 180 scripts/lab.sh up >"$log" 2>&1; then
        tail -20 "$log" >&2
        check "the lab's stack started" false
        check_group_end
        lab__down
        return 0
    fi
    check "the lab's stack started" true
    check_group_end

    if [ -x "$build/tests/stack/test_lab_routes" ]; then
        LAB_FAULTS=on LAB_LEASE_MS=1500 LOCK_WAIT_MS=1000 STOCK_URL=http://127.0.0.1:$base \
            REPLICA_URLS=http://127.0.0.1:$((base + 1)),http://127.0.0.1:$((base + 2)),http://127.0.0.1:$((base + 3)) \
            ADMIN_TOKEN=unused REDIS_PORT=$redis PG_PORT=$pg RUN_DIR=$dir \
            run_suite test_lab_routes-on 120 "$build/tests/stack/test_lab_routes"
    else
        suite_broken test_lab_routes-on "$build/tests/stack/test_lab_routes missing"
    fi

    check_group_begin "lab-page"
    if ! command -v node >/dev/null || ! command -v chromium >/dev/null; then
        check "node and chromium are installed (scripts/deps.sh ensure browser)" false
    else
        rc=0
        timeout --kill-after=10 240 node tests/lab_page.mjs "http://127.0.0.1:$base" \
            "$HARNESS_LOG_DIR/lab-page.png" >"$HARNESS_LOG_DIR/lab-page.log" 2>&1 || rc=$?
        while IFS= read -r line; do
            case $line in
            "ok   "*) check "${line#ok   }" true ;;
            "FAIL "*) check "${line#FAIL }" false ;;
            esac
        done <"$HARNESS_LOG_DIR/lab-page.log"
        check "tests/lab_page.mjs ran to its end (status $rc)" lab__page_ran "$rc"
    fi
    check_group_end

    check_group_begin "lab-down"
    env "${LAB__ENV[@]}" scripts/lab.sh down >>"$log" 2>&1 || true
    for n in 1 2 3; do
        check "lab svc-$n stopped with status 0" ladder__exit_zero "$dir" "$n"
        check "lab svc-$n logs hold no sanitizer report" it__no_sanitizer_report "$dir/logs/svc-$n.log"
    done
    check_group_end
    cp "$dir/logs/"svc-*.log "$HARNESS_LOG_DIR/" 2>/dev/null || true
    rm -rf "$dir"
    LAB__ENV=()
}

# Status 0 and a line per play: the driver did not stop half-way.
lab__page_ran() {
    [ "$1" = 0 ] || grep -q '^FAIL ' "$HARNESS_LOG_DIR/lab-page.log" ||
        { tail -5 "$HARNESS_LOG_DIR/lab-page.log" >&2; return 1; }
}

LAB__ENV=()
lab__down() {
    [ ${#LAB__ENV[@]} -gt 0 ] || return 0
    env "${LAB__ENV[@]}" scripts/lab.sh down >/dev/null 2>&1 || true
}
