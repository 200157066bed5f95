#!/usr/bin/env bash
# tests/loadtest_lib.sh - the parts of loadtest/lib/ that need no server, as a test (bash).
#
#   tests/loadtest_lib.sh            runs alone: one line per check, exit 1 when one failed
#   source tests/loadtest_lib.sh     (from tests/run-all.sh) defines run_loadtest_lib, which
#                                    reports through the harness's check
#
# It checks the row measurement's arithmetic (measure_combine: counts summed, req/s and
# latencies the median of the runs, the spread, the MEASURE line), the median itself,
# measure_check's bounds, reading a field of the service's flat JSON (books_num), summing one
# over several stock reports (books_sum), the machine's busy share between two readings
# (machine_busy), redis-batch's batches between two /metrics readings (metrics_batch_summary),
# the checker's model for each mode (history_model_for),
# that the defaults are stated once, in loadtest/lib/measure.sh, that every measurement
# loadtest/run makes records a history to judge, and that every sale load of loadtest/targets
# does.

run_loadtest_lib() {
    local dir
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-loadtest-lib.XXXXXX")
    check_group_begin "loadtest-lib"
    # shellcheck source=loadtest/lib/books.sh
    source loadtest/lib/books.sh
    # shellcheck source=loadtest/lib/machine.sh
    source loadtest/lib/machine.sh
    # shellcheck source=loadtest/lib/measure.sh
    source loadtest/lib/measure.sh
    # shellcheck source=loadtest/lib/metrics.sh
    source loadtest/lib/metrics.sh
    # shellcheck source=loadtest/lib/history.sh
    source loadtest/lib/history.sh
    check "books_num reads a string, a negative number, true and an absent field" loadtest_lib__num
    check "books_sum adds one field over concatenated stock reports" loadtest_lib__sum
    check "measure_median: odd count, even count, unsorted input" loadtest_lib__median
    check "measure_combine: counts summed, rps and latencies the medians, max the highest" \
        loadtest_lib__combine "$dir"
    check "measure_combine: a run without its RESULT line fails the row" loadtest_lib__combine_missing "$dir"
    check "measure_check refuses connections that are not a multiple of the threads" loadtest_lib__check
    check "machine_busy: the busy share between two readings" loadtest_lib__busy
    check "metrics_batch_summary: batches and their mean size between two readings" \
        loadtest_lib__batches
    check "history_model_for: units for redis-sharded, the exact stock for the others" \
        loadtest_lib__history_model
    check "the measurement's defaults are stated in one place" loadtest_lib__defaults_once
    check "every measure_row of the load tools records its history (MEASURE_HISTORY)" \
        loadtest_lib__measured_recorded
    check "every sale load of loadtest/targets records into its goods' history (sale_args)" \
        loadtest_lib__targets_recorded
    check_group_end
    rm -rf "$dir"
}

loadtest_lib__history_model() {
    [ "$(history_model_for redis-sharded)" = units ] && [ "$(history_model_for redis)" = stock ] &&
        [ "$(history_model_for redis-batch)" = stock ] && [ "$(history_model_for '')" = stock ]
}

loadtest_lib__batches() {
    [ "$(metrics_batch_summary "100 10" "1310 65")" = "55 batches, 22.0 requests each on average" ] &&
        [ "$(metrics_batch_summary "7 2" "7 2")" = - ]
}

loadtest_lib__num() {
    local j='{"ok":false,"error":"lock_timeout","stock":-3,"sold_out":true,"x":1.5}'
    books_num "$j" error && [ "$REPLY" = lock_timeout ] &&
        books_num "$j" stock && [ "$REPLY" = -3 ] &&
        books_num "$j" sold_out && [ "$REPLY" = true ] &&
        books_num "$j" x && [ "$REPLY" = 1.5 ] &&
        books_num "$j" missing && [ -z "$REPLY" ]
}

loadtest_lib__sum() {
    local books='{"goods_id":1,"stock":10,"sold":90,"oversold":0}{"goods_id":2,"stock":-2,"sold":102,"oversold":2}'
    [ "$(books_sum "$books" sold)" = 192 ] && [ "$(books_sum "$books" stock)" = 8 ] &&
        [ "$(books_sum "$books" oversold)" = 2 ] && [ "$(books_sum "$books" absent)" = 0 ]
}

loadtest_lib__median() {
    [ "$(measure_median 5)" = 5 ] && [ "$(measure_median 300.5 100 200)" = 200 ] &&
        [ "$(measure_median 4 1 3 2)" = 2.5 ]
}

loadtest_lib__combine() {
    local dir=$1 p=$1/row
    echo 'RESULT requests=100 sent=100 s200=90 s409=10 s503=0 other=0 e503_lock_timeout=0 e503_lock_lost=0 e503_unavailable=0 seconds=1.000 rps=100.0 p50_ms=10.000 p90_ms=20.000 p99_ms=30.000 max_ms=40.000 errors_connect=0 errors_read=0 errors_write=0 errors_timeout=0 threads=2' >"$p.r1.out"
    echo 'RESULT requests=300 sent=301 s200=300 s409=0 s503=0 other=0 e503_lock_timeout=0 e503_lock_lost=0 e503_unavailable=0 seconds=1.000 rps=300.0 p50_ms=5.000 p90_ms=6.000 p99_ms=70.000 max_ms=90.000 errors_connect=1 errors_read=0 errors_write=0 errors_timeout=0 threads=2' >"$p.r2.out"
    echo 'RESULT requests=200 sent=200 s200=199 s409=0 s503=1 other=0 e503_lock_timeout=1 e503_lock_lost=0 e503_unavailable=0 seconds=1.000 rps=200.0 p50_ms=7.000 p90_ms=8.000 p99_ms=9.000 max_ms=10.000 errors_connect=0 errors_read=0 errors_write=0 errors_timeout=0 threads=2' >"$p.r3.out"
    MEASURE_SECONDS=1 MEASURE_WARMUP_S=2 MEASURE_CONNECTIONS=64 MEASURE_THREADS=2 \
        measure_combine "$p" 3 0.50 0.75 || return 1
    [ "$(grep -c . "$p.out")" = 2 ] || return 1
    measure_result "$p.out"
    [ "${MEASURE_R[requests]}" = 600 ] && [ "${MEASURE_R[sent]}" = 601 ] &&
        [ "${MEASURE_R[s200]}" = 589 ] && [ "${MEASURE_R[s503]}" = 1 ] &&
        [ "${MEASURE_R[e503_lock_timeout]}" = 1 ] && [ "${MEASURE_R[errors_connect]}" = 1 ] &&
        [ "${MEASURE_R[seconds]}" = 3.000 ] && [ "${MEASURE_R[rps]}" = 200.0 ] &&
        [ "${MEASURE_R[p50_ms]}" = 7.000 ] && [ "${MEASURE_R[p90_ms]}" = 8.000 ] &&
        [ "${MEASURE_R[p99_ms]}" = 30.000 ] && [ "${MEASURE_R[max_ms]}" = 90.000 ] &&
        [ "${MEASURE_R[threads]}" = 2 ] && [ "${MEASURE_R[reps]}" = 3 ] &&
        [ "${MEASURE_R[rep_seconds]}" = 1 ] && [ "${MEASURE_R[warmup_s]}" = 2 ] &&
        [ "${MEASURE_R[connections]}" = 64 ] && [ "${MEASURE_R[rps_min]}" = 100.0 ] &&
        [ "${MEASURE_R[rps_max]}" = 300.0 ] && [ "${MEASURE_R[load1]}" = 0.50 ] &&
        [ "${MEASURE_R[busy]}" = 0.75 ]
}

loadtest_lib__combine_missing() {
    local p=$1/short
    echo 'RESULT requests=1 rps=1.0 p50_ms=1.000' >"$p.r1.out"
    : >"$p.r2.out"
    ! measure_combine "$p" 2 0 0 2>/dev/null
}

loadtest_lib__check() {
    (MEASURE_CONNECTIONS=64 MEASURE_THREADS=2 measure_check) &&
        ! (MEASURE_CONNECTIONS=63 MEASURE_THREADS=2 measure_check 2>/dev/null) &&
        ! (MEASURE_REPS=0 measure_check 2>/dev/null) &&
        ! (MEASURE_SECONDS=x measure_check 2>/dev/null)
}

loadtest_lib__busy() {
    [ "$(machine_busy '100 1000' '150 1100')" = 0.50 ] &&
        [ "$(machine_busy '100 1000' '100 1000')" = 0.00 ] &&
        [[ $(machine_ticks) =~ ^[0-9]+\ [0-9]+$ ]] && [[ $(machine_load1) =~ ^[0-9.]+$ ]]
}

# No tool restates a default of the measurement: each takes it from loadtest/lib/measure.sh.
loadtest_lib__defaults_once() {
    local v hits
    for v in MEASURE_CONNECTIONS MEASURE_THREADS MEASURE_WARMUP_S MEASURE_REPS MEASURE_SECONDS \
        MEASURE_STOCK; do
        hits=$(grep -l ": \"\${$v:=\|^$v=[0-9]\|\b$v:-[0-9]" loadtest/* loadtest/lib/*.sh 2>/dev/null)
        [ "$hits" = loadtest/lib/measure.sh ] || { echo "$v's default stated in: $hits" >&2; return 1; }
    done
}

# Every load a tool reports is judged: each measure_row call of loadtest/run and
# loadtest/chaos-pg (the tools that call it; a command continued over lines with
# backslashes) is given a MEASURE_HISTORY to record into, as their other loads are given a
# history. (The extra measurement of `make demo`'s rows, and chaos-pg's throughput, once were
# not.)
loadtest_lib__measured_recorded() {
    awk '{ line = line $0 }
         /\\$/ { sub(/\\$/, "", line); next }
         { if (line !~ /^[[:space:]]*#/ && line ~ /(^|[[:space:]])measure_row[[:space:]]/) {
               calls++
               if (line !~ /MEASURE_HISTORY=/) { print "no MEASURE_HISTORY: " line > "/dev/stderr"; bad++ }
           }
           line = "" }
         END { exit (calls >= 3 && !bad) ? 0 : 1 }' loadtest/run loadtest/chaos-pg
}

# Every load of loadtest/targets that sells (a `run` with a mode=) takes its goods and its
# history from sale_args, and nothing else names a goods for it: a sale load added to the
# round without them would sell unjudged.
loadtest_lib__targets_recorded() {
    awk '/^[[:space:]]*(sale_args .* && )?run [a-z0-9-]+ .* mode=/ {
             sales++
             if ($0 !~ /sale_args [^ ]+ [0-9] && run / || $0 !~ /"\$\{SALE\[@\]\}"$/ || $0 ~ / goods=/) {
                 print "not recorded: " $0 > "/dev/stderr"; bad++
             }
         }
         END { exit (sales >= 3 && !bad) ? 0 : 1 }' loadtest/targets
}

# Run alone: a minimal check with the harness's shape.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
    LOADTEST_LIB__FAILED=0
    check_group_begin() { echo "== $1"; }
    check_group_end() { :; }
    check() {
        local what=$1
        shift
        if "$@"; then echo "PASS $what"; else echo "FAIL $what"; LOADTEST_LIB__FAILED=1; fi
    }
    run_loadtest_lib
    exit "$LOADTEST_LIB__FAILED"
fi
